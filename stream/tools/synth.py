"""``mmr synth``: synthetic histories drawn from the Elo-MMR paper's generative model.

Why: the evaluation harness, the demo and the tests need data whose ground truth (true skills) is
known and that is reproducible bit for bit from a seed. The model is the one Elo-MMR is derived from:

* every player has a latent skill, initially ``N(mu0, sigma0²)``, taking a Gaussian random-walk
  step ``N(0, drift²)`` between rounds;
* in a round every participant performs ``skill + noise`` (logistic, Elo-MMR; or Gaussian, Elo-MMX
  and TrueSkill; standard deviation ``beta``); performances equal to a multiple of ``--tie-step`` tie;
* matches (``--kind matches``) pair two random players of a period; A wins when ahead by more than
  ``--draw-margin``. No side holds an advantage in this model, so every match is ``"neutral": true``;
  with ``--home-advantage H`` A plays at home, raised by H, and no match is neutral (its truth is H);
* team rounds (``--kind teams``, docs/teams.md): teams re-formed at random every round, a team
  performing the sum of its members' performances; skills drift once a day (as many rounds as it
  takes every player to play once); ``--truth FILE`` writes the final skills, ``mmr bench teams``'
  ground truth.

Rounds are written as the Elo-MMR reference's contest JSONL, matches and team rounds as
docs/interface.md events.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import click
import numpy as np
import numpy.typing as npt

from stream.files import write_jsonl_atomic

#: 2020-01-01T00:00:00Z: synthetic time starts here, one round (period) per day
EPOCH_S = 1_577_836_800
DAY_S = 86_400


def player_names(n: int) -> list[str]:
    """Zero-padded ids so that lexical and numeric order agree."""
    width = max(4, len(str(n - 1)))
    return [f"p{i:0{width}d}" for i in range(n)]


def _noise(rng: np.random.Generator, kind: str, beta: float, size: int) -> npt.NDArray[np.float64]:
    """Performance noise with standard deviation ``beta`` (logistic scale β·√3/π)."""
    if kind == "logistic":
        return rng.logistic(0.0, beta * math.sqrt(3.0) / math.pi, size)
    if kind == "gaussian":
        return rng.normal(0.0, beta, size)
    raise ValueError(f"unknown noise {kind!r}")


def tie_ranges(perf: npt.NDArray[np.float64], tie_step: float) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Order players best first; equal ``floor(perf / tie_step)`` tie.

    Returns ``(order, lo, hi)``: ``order[k]`` is the k-th best player and ``[lo[k], hi[k]]``
    its 0-based tie range, as the reference's contest format wants.
    """
    score = np.floor(perf / tie_step) if tie_step > 0 else perf
    order = np.lexsort((np.arange(len(perf)), -score))  # stable: ties by player index
    s = score[order]
    n = len(s)
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = s[1:] != s[:-1]
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    ends = np.append(starts[1:], n) - 1
    return order.astype(np.int64), starts[group].astype(np.int64), ends[group].astype(np.int64)


def synth_rounds(players: int, rounds: int, participation: float, seed: int, noise: str = "logistic",
                 beta: float = 200.0, drift: float = 35.0, mu0: float = 1500.0, sigma0: float = 350.0,
                 tie_step: float = 0.1, min_players: int = 2) -> Iterator[dict[str, Any]]:
    """Contest JSONL rows (see module docstring). Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    names = player_names(players)
    skill = rng.normal(mu0, sigma0, players)
    for r in range(rounds):
        if r:
            skill += rng.normal(0.0, drift, players)
        present = np.flatnonzero(rng.random(players) < participation)
        if len(present) < min_players:
            present = np.sort(rng.choice(players, size=min(min_players, players), replace=False))
        perf = skill[present] + _noise(rng, noise, beta, len(present))
        order, lo, hi = tie_ranges(perf, tie_step)
        idx = present[order]
        yield {
            "name": f"synth-{r + 1}",
            "time_seconds": EPOCH_S + r * DAY_S,
            "standings": [[names[i], int(a), int(b)] for i, a, b in zip(idx.tolist(), lo.tolist(), hi.tolist(),
                                                                        strict=True)],
        }


def synth_matches(players: int, rounds: int, matches: int, seed: int, noise: str = "logistic",
                  beta: float = 200.0, drift: float = 35.0, mu0: float = 1500.0, sigma0: float = 350.0,
                  draw_margin: float = 0.0, pool: str = "default", home_advantage: float | None = None,
                  ) -> Iterator[dict[str, Any]]:
    """docs/interface.md ``match`` events: ``matches`` spread evenly over ``rounds`` periods. Neutral
    (``"neutral": true``) unless ``home_advantage`` is given: then A plays at home, her performance
    raised by it (performance units of the model), and no match is neutral. The draws of the random
    generator are the same either way."""
    home = 0.0 if home_advantage is None else home_advantage
    side: dict[str, Any] = {"neutral": True} if home_advantage is None else {}
    rng = np.random.default_rng(seed)
    names = player_names(players)
    skill = rng.normal(mu0, sigma0, players)
    per = np.full(rounds, matches // rounds, dtype=np.int64)
    per[: matches % rounds] += 1
    k = 0
    for r in range(rounds):
        if r:
            skill += rng.normal(0.0, drift, players)
        m = int(per[r])
        if m == 0:
            continue
        a = rng.integers(0, players, m)
        b = (a + rng.integers(1, players, m)) % players  # never a == b
        diff = skill[a] - skill[b] + _noise(rng, noise, beta, m) - _noise(rng, noise, beta, m) + home
        score = np.where(diff > draw_margin, 1.0, np.where(diff < -draw_margin, 0.0, 0.5))
        t0 = (EPOCH_S + r * DAY_S) * 1000
        for j in range(m):
            yield {"type": "match", "event_id": f"synth-m{k + 1}", "pool": pool, "time": t0 + j,
                   "a": names[int(a[j])], "b": names[int(b[j])], "score": float(score[j]), **side}
            k += 1


def synth_team_rounds(players: int, rounds: int, team_size: int, teams: int, seed: int, noise: str = "logistic",
                      beta: float = 200.0, drift: float = 35.0, mu0: float = 1500.0, sigma0: float = 350.0,
                      tie_step: float = 0.1, pool: str = "default", team_noise: str = "member",
                      ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """docs/interface.md ``round`` events with ``teams`` (see module docstring) and every player's final skill.
    ``team_noise``: ``member``, a team performs the sum of its members' performances (each with its own
    noise); ``team``, the mean of its members' skills plus one noise of the team (docs/teams.md, "Large teams")."""
    per_round = team_size * teams
    if teams < 2 or team_size < 1 or per_round > players:
        raise ValueError(f"{teams} teams of {team_size} need at least {per_round} players (have {players})")
    rng = np.random.default_rng(seed)
    names = player_names(players)
    skill = rng.normal(mu0, sigma0, players)
    per_day = max(1, players // per_round)
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        day, k = divmod(r, per_day)
        if r and k == 0:
            skill += rng.normal(0.0, drift, players)
        who = rng.choice(players, size=per_round, replace=False).reshape(teams, team_size)
        if team_noise == "team":
            perf = skill[who].mean(axis=1) + _noise(rng, noise, beta, teams)
        else:
            perf = (skill[who] + _noise(rng, noise, beta, per_round).reshape(teams, team_size)).sum(axis=1)
        score = np.floor(perf / tie_step) if tie_step > 0 else perf
        rank = 1 + (score[None, :] > score[:, None]).sum(axis=1)  # 1 + teams strictly ahead
        rows.append({
            "type": "round", "event_id": f"synth-t{r + 1}", "pool": pool, "round_id": f"synth-t{r + 1}",
            "time": (EPOCH_S + day * DAY_S) * 1000 + k,
            "teams": [{"players": [names[i] for i in who[t].tolist()], "rank": int(rank[t])} for t in range(teams)],
        })
    return rows, {names[i]: float(skill[i]) for i in range(players)}


@click.command()
@click.option("--players", type=click.IntRange(2), default=1000, show_default=True, help="Number of players.")
@click.option("--rounds", type=click.IntRange(1), default=100, show_default=True,
              help="Rounds (kind=rounds) or rating periods the matches are spread over (kind=matches).")
@click.option("--participation", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.3, show_default=True,
              help="Probability that a player takes part in a round.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (same seed, same file).")
@click.option("--noise", type=click.Choice(["logistic", "gaussian"]), default="logistic", show_default=True,
              help="Performance noise: logistic (Elo-MMR) or Gaussian (Elo-MMX, TrueSkill).")
@click.option("--kind", type=click.Choice(["rounds", "matches", "teams"]), default="rounds", show_default=True)
@click.option("--team-size", type=click.IntRange(1), default=2, show_default=True, help="kind=teams: players a team.")
@click.option("--teams", "n_teams", type=click.IntRange(2), default=2, show_default=True,
              help="kind=teams: teams a round.")
@click.option("--team-noise", type=click.Choice(["member", "team"]), default="member", show_default=True,
              help="kind=teams: member = a team performs the sum of its members' performances, each with "
                   "its own noise; team = the mean of its members' skills plus one noise of the team.")
@click.option("--truth", type=click.Path(dir_okay=False), default=None,
              help="kind=teams: also write every player's final true skill (JSON) here.")
@click.option("--matches", type=click.IntRange(1), default=10_000, show_default=True, help="kind=matches: count.")
@click.option("--beta", type=float, default=200.0, show_default=True, help="Performance noise sd.")
@click.option("--drift", type=float, default=35.0, show_default=True, help="Skill random-walk sd per round.")
@click.option("--mu0", type=float, default=1500.0, show_default=True, help="Mean initial skill.")
@click.option("--sigma0", type=float, default=350.0, show_default=True, help="Sd of initial skills.")
@click.option("--tie-step", type=float, default=0.1, show_default=True,
              help="kind=rounds: performances equal after flooring to this step tie (0 = no ties).")
@click.option("--draw-margin", type=float, default=0.0, show_default=True,
              help="kind=matches: |performance difference| at most this is a draw.")
@click.option("--home-advantage", type=float, default=None,
              help="kind=matches: A plays at home with this advantage (performance units, as --beta), and "
                   "the matches are not neutral (a pool that learns the advantage, docs/advantage.md, should "
                   "find it). Without it there is no side advantage in the model and every match says "
                   '"neutral": true.')
@click.option("--pool", default="default", show_default=True, help="kind=matches/teams: pool of the events.")
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Output JSONL file.")
def synth(players: int, rounds: int, participation: float, seed: int, noise: str, kind: str, team_size: int,
          n_teams: int, team_noise: str, truth: str | None, matches: int, beta: float, drift: float, mu0: float,
          sigma0: float, tie_step: float, draw_margin: float, home_advantage: float | None, pool: str,
          out: str) -> None:
    """Write synthetic rounds (contest JSONL), matches or team rounds (event JSONL) to --out.

    Matches are neutral (no side advantage in the model) unless --home-advantage is given."""
    if kind == "teams":
        try:
            team_rows, skills = synth_team_rounds(players, rounds, team_size, n_teams, seed, noise, beta, drift, mu0,
                                                  sigma0, tie_step, pool, team_noise)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
        n = write_jsonl_atomic(out, iter(team_rows))
        if truth is not None:
            write_jsonl_atomic(truth, iter([skills]))
        click.echo(f"wrote {n} team rounds to {out}", err=True)
        return
    if kind == "rounds":
        rows = synth_rounds(players, rounds, participation, seed, noise, beta, drift, mu0, sigma0, tie_step)
    else:
        rows = synth_matches(players, rounds, matches, seed, noise, beta, drift, mu0, sigma0, draw_margin, pool,
                             home_advantage)
    n = write_jsonl_atomic(out, rows)
    click.echo(f"wrote {n} {'rounds' if kind == 'rounds' else 'matches'} to {out}", err=True)
