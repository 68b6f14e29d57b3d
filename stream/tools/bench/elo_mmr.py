"""``mmr bench elo-mmr``: single rounds and the whole Codeforces history.

Peers: our plain O(N²) oracle, the Rust reference ``elo_mmr_py`` (``mmr`` exact, ``mmr-fast``
subsampled) and openskill.py's Plackett-Luce, each on the same round. The whole-history run reads
the file itself (lzma + orjson) to measure the rating core without the replay's reader.
"""

from __future__ import annotations

import functools
import lzma
import math
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import click
import numpy as np
import orjson

from stream.engine.pool import PoolEngine
from stream.events.model import RoundEvent
from stream.files import prefetched
from stream.ratings.base import Belief
from stream.ratings.elo_mmr.system import EloMMR, warmup
from stream.state.packed_pool import PackedPool
from stream.tools.bench import best_times
from stream.tools.synth import tie_ranges

ORACLE_MAX = 10_000


def _round_setup(n: int, seed: int) -> tuple[EloMMR, list[Belief], np.ndarray, list[np.ndarray]]:
    """A round of n players after 3 warm-up rounds (so terms differ), ranks with ties: (system, beliefs
    before the round, the round's ranks, the warm-up ranks, for the reference to get the same history)."""
    rng = np.random.default_rng(seed)
    system = EloMMR()
    beliefs = [system.new_belief() for _ in range(n)]
    skill = rng.normal(0, 1, n)
    warm = []
    for r in range(3):
        ranks = np.argsort(np.argsort(-(skill + rng.normal(0, 1, n)))) + 1
        beliefs = system.rate_round(beliefs, ranks, r * 86_400_000)
        warm.append(ranks)
    ranks = (np.argsort(np.argsort(-(skill + rng.normal(0, 1, n)))) // 3) + 1  # triples tie
    return system, beliefs, ranks, warm


def _time_oracle(system: EloMMR, beliefs: list[Belief], ranks: np.ndarray) -> tuple[float, str]:
    """The naive oracle on the round, or above ORACLE_MAX its per-rank solve × ranks."""
    from stream.ratings.elo_mmr import naive

    if len(beliefs) <= ORACLE_MAX:
        run = functools.partial(naive.rate_round_naive, beliefs, ranks, 4 * 86_400_000, system.params)
        return best_times(run, 1)[0] * 1e3, ""
    mu = np.array([b[0] for b in beliefs])
    s = np.array([math.hypot(b[1], 200.0) for b in beliefs])
    distinct = np.unique(ranks)
    sample = distinct[:: max(1, distinct.size // 50)]
    t = time.perf_counter()
    for r in sample:
        rel = np.sign(ranks - r).astype(np.float64)
        equation = functools.partial(naive._logistic_terms, mu=mu, s=s, rel=rel, split=False)
        naive.illinois(equation, -6000.0, 9000.0)
    per_rank = (time.perf_counter() - t) / sample.size
    return per_rank * distinct.size * 1e3, " (extrapol.)"


def _time_reference(warm: list[np.ndarray], ranks: np.ndarray, system_name: Any) -> float | None:
    """The reference's time for the same round after the same warm-up rounds (untimed)."""
    try:
        import elo_mmr_py
    except ImportError:
        return None

    def contest(r: np.ndarray, day: int) -> Any:  # best first, 0-based tie ranges; ties in the players' order
        order, lo, hi = tie_ranges(-np.asarray(r, dtype=np.float64), 0.0)
        standings = [(f"p{i}", a, b) for i, a, b in zip(order.tolist(), lo.tolist(), hi.tolist(), strict=True)]
        return elo_mmr_py.Contest(standings=standings, name=f"d{day}", time_seconds=day * 86_400)

    rater = elo_mmr_py.Rater(system_name)
    rater.extend([contest(r, d) for d, r in enumerate(warm)])
    final = contest(ranks, 4)
    t = time.perf_counter()
    rater.add(final)
    return (time.perf_counter() - t) * 1e3


def _time_openskill(ranks: np.ndarray) -> float | None:
    try:
        from openskill.models import PlackettLuce
    except ImportError:
        return None
    model = PlackettLuce()
    teams = [[model.rating()] for _ in range(len(ranks))]
    rank_list = [float(r) for r in ranks]
    return best_times(lambda: model.rate(teams, ranks=rank_list), 1)[0] * 1e3


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """Contests of the reference's JSONL format (xz or plain)."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rb") as fh:
        for line in fh:
            if line.strip():
                yield orjson.loads(line)


def _parsed_rounds(path: Path) -> Iterator[tuple[list[str], np.ndarray, int, float, float]]:
    """(names, ranks, time_ms, weight, perf_ceiling) of every contest."""
    for contest in read_history(path):
        standings = contest["standings"]
        names = [s[0] for s in standings]
        ranks = np.fromiter((s[1] + 1 for s in standings), dtype=np.int64, count=len(standings))
        ceiling = contest.get("perf_ceiling")
        yield (names, ranks, int(contest["time_seconds"]) * 1000, float(contest.get("weight", 1.0)),
               math.inf if ceiling is None else float(ceiling))


def run_history(path: Path, system: EloMMR, packed: bool) -> tuple[float, int, int]:
    """(seconds, rounds, results) of the whole history through ``rate_round`` on numpy arrays or, ``packed``,
    through the engine's round path on packed beliefs (``PoolEngine.store_round`` on the pool's arena, as
    ``mmr replay --embedded`` rates it)."""
    t = time.perf_counter()
    beliefs: dict[str, Belief] = {}
    engine, held = PoolEngine("bench", system), PackedPool()
    rounds = results = 0
    for k, (names, ranks, time_ms, weight, ceiling) in enumerate(prefetched(_parsed_rounds(path), depth=16)):
        if packed:
            event = RoundEvent(event_id=f"e{k}", pool="bench", round_id=f"r{k}", time=time_ms, players=names,
                               ranks=ranks, weight=weight, perf_ceiling=ceiling)
            held.update(cast("Mapping[str, bytes]", engine.store_round(event, held)))
        else:
            current = [b if (b := beliefs.get(name)) is not None else system.new_belief() for name in names]
            beliefs.update(zip(names, system.rate_round(current, ranks, time_ms, weight, ceiling), strict=True))
        rounds += 1
        results += len(names)
    return time.perf_counter() - t, rounds, results


def run_reference_history(path: Path, system_name: Any) -> float:
    import elo_mmr_py

    t = time.perf_counter()
    contests = [elo_mmr_py.Contest(standings=[tuple(s) for s in c["standings"]], name=c.get("name"),
                                   time_seconds=int(c["time_seconds"]), weight=float(c.get("weight", 1.0)))
                for c in read_history(path)]
    elo_mmr_py.rate_latest(contests, system=system_name)
    return time.perf_counter() - t


@click.command("elo-mmr")
@click.option("--sizes", default="1000,10000,100000", show_default=True, help="round sizes (players)")
@click.option("--history", "history", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="contest JSONL (.xz) of the Elo-MMR reference, e.g. path/to/contests-2010-2020.jsonl.xz; "
                   "without it the whole-history run is skipped")
@click.option("--reference-history/--no-reference-history", default=False, show_default=True,
              help="also time elo_mmr_py mmr-fast on the whole history (slow: ~1-2 min)")
@click.option("--peers/--no-peers", default=True, show_default=True, help="time oracle/reference/openskill")
def bench_elo_mmr(sizes: str, history: Path | None, reference_history: bool, peers: bool) -> None:
    """One round of each size for us and the peers, then the whole Codeforces history."""
    t = time.perf_counter()
    warmup()
    click.echo(f"warmup (compile or load cache): {time.perf_counter() - t:.2f} s")
    header = f"{'players':>8} | {'ours ms':>9} | {'oracle ms':>22} | {'mmr ms':>9} | {'mmr-fast ms':>11} | " \
             f"{'openskill PL ms':>15} | {'PL/ours':>8}"
    click.echo(header)
    click.echo("-" * len(header))
    for n in (int(x) for x in sizes.split(",") if x.strip()):
        system, beliefs, ranks, warm = _round_setup(n, seed=n)
        ours = best_times(functools.partial(system.rate_round, beliefs, ranks, 4 * 86_400_000), 5)[0] * 1e3
        cells = [f"{n:>8}", f"{ours:>9.2f}"]
        if peers:
            oracle, note = _time_oracle(system, beliefs, ranks)
            ref = _time_reference(warm, ranks, "mmr") if n <= ORACLE_MAX else None
            fast = _time_reference(warm, ranks, "mmr-fast")
            ops = _time_openskill(ranks) if n <= ORACLE_MAX else None
            cells += [f"{oracle:>9.1f}{note:<13}", _fmt(ref, 9), _fmt(fast, 11), _fmt(ops, 15),
                      _fmt(ops / ours if ops else None, 8, "x")]
        click.echo(" | ".join(cells))
    if history is not None:
        for label, packed in (("packed beliefs in one arena, PoolEngine.store_round", True),
                              ("numpy arrays, rate_round", False)):
            cpu = time.process_time()
            secs, rounds, results = run_history(history, EloMMR(), packed)
            cpu = time.process_time() - cpu
            click.echo(f"whole history ours (elo-mmr, history_limit=100, {label}): {secs:.2f} s wall, "
                       f"{cpu:.2f} s CPU ({rounds} rounds, {results} results, incl. reading)")
        if reference_history:
            click.echo(f"whole history elo_mmr_py mmr-fast: {run_reference_history(history, 'mmr-fast'):.2f} s")
    else:
        click.echo("no --history FILE: whole-history run skipped")


def _fmt(value: float | None, width: int, suffix: str = "") -> str:
    return f"{'n/a':>{width}}" if value is None else f"{value:>{width - len(suffix)}.1f}{suffix}"
