"""``mmr bench cowan``: matches per second of Cowan's system and bytes per stored belief.

Each row gives wall-clock matches/s and matches per CPU-second of the process (the per-core rate,
which stays meaningful when other jobs share the cores): batches on one and on all numba threads,
one match per ``rate_matches`` call, the draw and Laplace variants, and the naive oracle. Rows
marked "raw" skip the quantisation after every match (the codec's fixed point is the state,
``stream.ratings.cowan.quant``), so the difference is its cost. Players are "established" by
warm-up matches first, because window sizes (cells carrying mass) drive the cost.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import functools
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import click
import numba
import numpy as np

from stream.ratings.base import Belief
from stream.ratings.cowan.codec import CowanCodec
from stream.ratings.cowan.system import Cowan, warmup
from stream.tools.bench import best_times


def _schedule(rng: np.random.Generator, players: int, matches: int) -> tuple[np.ndarray, np.ndarray]:
    a = rng.integers(0, players, matches)
    b = (a + rng.integers(1, players, matches)) % players
    return a.astype(np.int64), b.astype(np.int64)


def _established(system: Cowan, players: int, games: int, seed: int) -> list[Belief]:
    """Every player ~``games`` matches of history (skill-driven results)."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(0, 0.7, players)
    beliefs = [system.new_belief() for _ in range(players)]
    n = players * games // 2
    a, b = _schedule(rng, players, n)
    p = 0.1 + 0.8 / (1.0 + np.exp(skill[b] - skill[a]))
    scores = (rng.random(n) < p).astype(float)
    return system.rate_matches(beliefs, a, b, scores, np.zeros(n, np.int64))


def _each(fn: Callable[[Any], object], items: list[Any]) -> None:
    for x in items:
        fn(x)


@click.command("cowan")
@click.option("--players", default=2000, show_default=True, help="players in the batch")
@click.option("--matches", default=10_000, show_default=True, help="matches per batch")
@click.option("--history", default=40, show_default=True, help="warm-up matches per player")
@click.option("--single", default=2000, show_default=True, help="matches timed one at a time")
@click.option("--naive", "naive_n", default=10, show_default=True, help="matches timed with the oracle")
@click.option("--repeat", default=3, show_default=True, help="best of N")
@click.option("--seed", default=1, show_default=True)
@click.option("--quantise/--no-quantise", default=True, show_default=True,
              help="quantise beliefs after every match (the pipeline's state); raw rows are always added")
@click.option("--replay", "replay_matches", default=200_000, show_default=True,
              help="matches of the whole-process replay against openskill's loop (0: skip)")
@click.option("--replay-players", default=20_000, show_default=True, help="players of that replay")
@click.option("--replay-pairs", default=2, show_default=True, help="alternating runs of each program")
@click.option("--only-replay", is_flag=True, help="only the whole-process replay against openskill")
def bench_cowan(players: int, matches: int, history: int, single: int, naive_n: int, repeat: int, seed: int,
                quantise: bool, replay_matches: int, replay_players: int, replay_pairs: int, only_replay: bool) -> None:
    """Matches/s per core (batched and one at a time), naive vs fast, bytes per belief; the
    whole embedded replay against openskill.py's 1-v-1 loop (``bench_cowan_replay``)."""
    if not only_replay:
        _kernel_rows(players, matches, history, single, naive_n, repeat, seed, quantise)
    if replay_matches:
        from stream.tools.bench.cowan_replay import side_by_side

        side_by_side(replay_matches, replay_players, replay_pairs, seed)


def _kernel_rows(players: int, matches: int, history: int, single: int, naive_n: int, repeat: int, seed: int,
                 quantise: bool) -> None:
    t0 = time.perf_counter()
    warmup()
    click.echo(f"warm-up (compile or load cache): {time.perf_counter() - t0:.2f} s")
    threads = numba.get_num_threads()
    click.echo(f"machine: {platform.machine()} {os.cpu_count()} cpus, numba threads {threads}, "
               f"load average {os.getloadavg()[0]:.2f}")
    fast = Cowan()
    rng = np.random.default_rng(seed)
    est = _established(fast, players, history, seed)
    fresh = [fast.new_belief() for _ in range(players)]
    a, b = _schedule(rng, players, matches)
    wins = rng.integers(0, 2, matches).astype(float)
    draws = np.full(matches, 0.5)
    zeros = np.zeros(matches, np.int64)
    cells_est = float(np.mean([len(x) - 2 for x in est]))
    cells_new = float(len(fresh[0]) - 2)
    rows: list[tuple[str, str, float, float]] = []

    def batch(system: Cowan, beliefs: list[Belief], scores: np.ndarray, nthreads: int, label: str,
              who: str, count: int = matches, q: bool = quantise) -> float:
        numba.set_num_threads(nthreads)
        system.parallel_min_batch = 256 if nthreads > 1 else 10**12
        wall, cpu = best_times(lambda: system.rate_matches(beliefs, a[:count], b[:count], scores[:count],
                                                           zeros[:count], quantise=q), repeat)
        numba.set_num_threads(threads)
        rows.append((label, who, count / wall, count / cpu))
        return count / cpu

    serial_est = batch(fast, est, wins, 1, "fast (SOE), batch, 1 thread", "established")
    raw_est = batch(fast, est, wins, 1, "fast (SOE), batch, 1 thread, raw", "established", q=False)
    new_q = batch(fast, fresh, wins, 1, "fast (SOE), batch, 1 thread", "new")
    raw_new = batch(fast, fresh, wins, 1, "fast (SOE), batch, 1 thread, raw", "new", q=False)
    if threads > 1:
        batch(fast, est, wins, threads, f"fast (SOE), batch, {threads} threads", "established")
    batch(fast, est, draws, 1, "fast, paper-form draws (complex SOE)", "established")
    batch(fast, fresh, draws, 1, "fast, paper-form draws (complex SOE)", "new")
    batch(Cowan({"draw_form": "blatmmr"}), est, draws, 1, "fast, blatmmr-form draws", "established")
    lap = Cowan({"algorithm": "laplace"})
    est_lap = _established(lap, players, history, seed)
    batch(lap, est_lap, wins, 1, "laplace variant, batch, 1 thread", "established")

    # one at a time through the public API (Python overhead included)
    n1 = min(single, matches)
    first, second = np.zeros(1, np.int64), np.ones(1, np.int64)

    def one_at_a_time(q: bool) -> None:
        cur = list(est)
        for m in range(n1):
            i, j = int(a[m]), int(b[m])
            cur[i], cur[j] = fast.rate_matches([cur[i], cur[j]], first, second, wins[m : m + 1], zeros[:1],
                                               quantise=q)

    for q, raw in ((quantise, ""), (False, ", raw")):
        wall, cpu = best_times(functools.partial(one_at_a_time, q), 1)
        rows.append((f"fast, one match per rate_matches call{raw}", "established", n1 / wall, n1 / cpu))

    def naive() -> None:
        for m in range(naive_n):
            fast.naive_update(est[int(a[m])], est[int(b[m])], float(wins[m]))

    wall, cpu = best_times(naive, 1)
    naive_rate = naive_n / cpu
    rows.append(("naive oracle (§4.1, O(|A|·|B|))", "established", naive_n / wall, naive_rate))

    click.echo(f"grid n={fast.p.n}, cells carrying mass: new {cells_new:.0f}, established {cells_est:.0f} "
               f"(after {history} matches/player); batch = {matches} matches among {players} players")
    click.echo(f"{'path':44s} {'players':12s} {'matches/s':>12s} {'per CPU-s':>12s}")
    for label, who, r, per in rows:
        click.echo(f"{label:44s} {who:12s} {r:12,.0f} {per:12,.0f}")
    click.echo(f"fast / naive speed-up (CPU time, established): {serial_est / naive_rate:,.0f}x")
    if quantise:
        for who, q_rate, raw_rate in (("established", serial_est, raw_est), ("new", new_q, raw_new)):
            click.echo(f"quantisation after every match ({who}): {1e6 / q_rate - 1e6 / raw_rate:.1f} µs per "
                       f"match (CPU), {100.0 * (raw_rate / q_rate - 1.0):.0f}% more time than raw")
    click.echo("matches/s = wall clock (best of --repeat); per CPU-s = matches per second of process CPU")
    click.echo("time summed over threads, i.e. per core, robust to other load on a shared machine")

    codec = CowanCodec()
    for who, beliefs in (("new", fresh), ("established", est)):
        data = [codec.encode(x) for x in beliefs[:200]]
        dec = [codec.decode(d) for d in data]
        tv = max(0.5 * float(np.abs(fast.full(x) - fast.full(y)).sum()) for x, y in zip(beliefs, dec, strict=False))
        enc_us = best_times(functools.partial(_each, codec.encode, beliefs[:200]), repeat)[0] / 200 * 1e6
        dec_us = best_times(functools.partial(_each, codec.decode, data), repeat)[0] / 200 * 1e6
        click.echo(f"codec {who:12s} bytes mean {np.mean([len(d) for d in data]):6.0f} max "
                   f"{max(len(d) for d in data):5d} (float64 window {8 * np.mean([len(x) for x in beliefs[:200]]):6.0f}"
                   f"); max TV {tv:.1e}; encode {enc_us:5.1f} µs, decode {dec_us:5.1f} µs")
