"""``mmr eval`` on team rounds: hand-checked scores, the qualifying rule, refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stream.events.model import RoundEvent, Teams
from stream.ratings import make_system
from stream.tools.evaluate import evaluate, evaluate_events


def team_round(k: int, teams: list[list[str]], ranks: list[int], weights: list[list[float]] | None = None,
               ) -> RoundEvent:
    players = [p for t in teams for p in t]
    team_of = np.repeat(np.arange(len(teams)), [len(t) for t in teams]).astype(np.int64)
    w = np.ones(len(players)) if weights is None else np.array([x for t in weights for x in t])
    return RoundEvent(event_id=f"e{k}", pool="p", round_id=f"e{k}", time=k * 86_400_000, players=players,
                      ranks=np.array([ranks[t] for t in team_of.tolist()], dtype=np.int64),
                      teams=Teams(team_of=team_of, ranks=np.array(ranks, dtype=np.int64), weights=w))


def test_two_team_rounds_by_hand() -> None:
    events = [
        team_round(1, [["a", "b"], ["c", "d"]], [1, 2]),  # p = ½, s = 1; a, b → 1516, c, d → 1484
        team_round(2, [["a", "c"], ["b", "d"]], [1, 1]),  # a tie of two 1500 teams: p = ½, s = ½; no change
        team_round(3, [["a", "b"], ["c"]], [2, 1]),  # 1516 against 1484, the first team lost
    ]
    res, _ = evaluate_events(make_system("elo"), events, warmup=0.0, min_history=0)
    p3 = 1.0 / (1.0 + 10.0 ** (-32.0 / 400.0))
    assert res["n_team_two"] == 3
    assert res["team_log_loss"] == pytest.approx((math.log(2) + math.log(2) - math.log(1 - p3)) / 3, rel=1e-12)
    assert res["team_brier"] == pytest.approx((0.25 + 0.0 + p3**2) / 3, rel=1e-12)
    assert res["team_accuracy"] == 0.0  # p = ½ is not a prediction that the first team wins
    # pairs: ½ wrong (predicted equal), correct (a tie), wrong; two teams each
    assert res["team_pair_inversion"] == pytest.approx(50.0)
    # rank deviations: ½, ½ | 0, 0 | 1, 1
    assert res["team_rank_deviation"] == pytest.approx(50.0)
    assert res["n_scored_team_rounds"] == 3 and res["n_rounds"] == 3
    assert "pair_inversion" not in res and "n_two_player" not in res  # no individual events
    # the two-team predictions are the log loss and Brier of the history, as matches' would be
    assert (res["log_loss"], res["brier"], res["n_two_sided"]) == (res["team_log_loss"], res["team_brier"], 3)


def test_more_teams_and_the_qualifying_rule() -> None:
    elo = make_system("elo")
    warm = [team_round(1, [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]], [1, 2, 3, 4, 5, 6])]
    # after the warm-up round: a > b > c > d > e > f; "new" has no history and disqualifies its team
    scored = team_round(2, [["e", "f"], ["a", "b"], ["c", "d"], ["new", "a2"]], [1, 3, 2, 1])
    res, ev = evaluate_events(elo, [*warm, scored], score_from=1, min_history=1)
    assert "n_team_two" not in res  # four teams
    assert res["n_scored_team_rounds"] == 1 and res["n_scored_teams"] == 3
    # strengths: (a, b) > (c, d) > (e, f); outcome e,f first, c,d second, a,b third: all three pairs wrong
    assert res["team_pair_inversion"] == pytest.approx(100.0)
    # predicted places 1, 2, 3 against 3, 2, 1: deviations 2, 0, 2 places over N − 1 = 2
    assert res["team_rank_deviation"] == pytest.approx(100.0 * (1.0 + 0.0 + 1.0) / 3)
    assert set(ev.beliefs["p"]) == {"a", "b", "c", "d", "e", "f", "new", "a2"}  # everybody is rated


def test_partial_play_weights_reach_the_predictions() -> None:
    elo = make_system("elo")
    events = [team_round(1, [["a"], ["b"]], [1, 2]),  # a 1516, b 1484
              team_round(2, [["a", "b"], ["c"]], [1, 2], weights=[[1.0, 0.25], [1.0]])]
    res, _ = evaluate_events(elo, events, score_from=1, min_history=0)
    team = (1516.0 + 0.25 * 1484.0) / 1.25
    p = 1.0 / (1.0 + 10.0 ** ((1500.0 - team) / 400.0))
    assert res["team_log_loss"] == pytest.approx(-math.log(p), rel=1e-12)


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows() -> list[dict[str, object]]:
    return [{"type": "round", "event_id": f"g{k}", "pool": "duos", "round_id": f"g{k}", "time": 1764000000000 + k,
             "teams": [{"players": ["ann", "bob"], "rank": 1 + k % 2}, {"players": ["cat", "dan"], "rank": 2 - k % 2}]}
            for k in range(8)]


@pytest.mark.parametrize("system", ["elo", "trueskill", "elo-mmx", "elo-mmr"])
def test_eval_cli_scores_team_rounds(tmp_path: Path, system: str) -> None:
    path = _write(tmp_path / "teams.jsonl", _rows())
    res = CliRunner().invoke(evaluate, [str(path), "--system", system, "--json", "--warmup", "0.5",
                                        "--min-history", "1"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["n_team_two"] == 4 and out["n_rounds"] == 8
    assert 0.0 < out["team_log_loss"] < 5.0 and 0.0 <= out["team_brier"] <= 1.0


def test_eval_cli_refuses_team_rounds_of_a_system_without_teams(tmp_path: Path) -> None:
    path = _write(tmp_path / "teams.jsonl", _rows())
    res = CliRunner().invoke(evaluate, [str(path), "--system", "glicko", "--json"])
    assert res.exit_code == 2
    assert "glicko does not rate team rounds" in res.output
