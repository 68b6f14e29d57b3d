"""``mmr bench service --history FILE``: a whole real history through the worker, beside the embedded replay.

Why phases of their own: the others send
uniform synthetic load to pools of 10,000 players, while a real history (the Codeforces file: rounds of
up to ~30,000 of 280,701 players) makes takes of hundreds of rounds and Redis steps touching a large
share of the pool. ``history`` publishes the file as ``mmr replay --broker`` would (pool ``hist``) and
reports the wall time to the last message committed and published, the longest Redis command with this
run's keys (``SLOWLOG``: Redis runs nothing else meanwhile, which ``MMR_MAX_STEP_PLAYERS`` bounds) and
whether the final state equals ``mmr replay --embedded`` bit for bit; ``replay`` runs ``mmr replay
--broker`` itself against ``--embedded`` (``replay_vs_embedded``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median
from typing import Any

import click
import redis

from stream.events.inputs import CsvMapping
from stream.files import iter_records
from stream.service.config import Settings
from stream.tools.bench import timed
from stream.tools.bench.cpu_meter import CpuMeter, ThreadTimes, peak_rss_mib
from stream.tools.bench.worker import (
    DONE,
    _metric,
    _stage_summary,
    _stage_totals,
    _wait_done,
    differing_rows,
)
from stream.tools.publish import messages

POOL = "hist"
#: matches per ``match_columns`` message, as ``mmr replay --broker``'s default batch
BATCH = 4096


def history_messages(path: str, s: Settings) -> tuple[str, list[tuple[bytes, bytes]], int]:
    """(topic, [(key, value)], results): the file as ``mmr replay --broker`` publishes it into
    pool ``hist``. One kind of event per file (rounds, matches or round results), so that
    one topic's clock measures it."""
    results = 0

    def counted(records: Iterator[tuple[str, str, Any]]) -> Iterator[tuple[str, str, Any]]:
        nonlocal results
        for where, etype, value in records:  # a round's results are its standings
            results += (len(value.players) if etype == "round" else len(value) if isinstance(value, list)
                        else int(etype != "round_completed"))
            yield where, etype, value

    msgs = list(messages(counted(iter_records((path,), POOL, CsvMapping(), False)), s, BATCH))
    topics = {topic for topic, *_ in msgs}
    if len(topics) != 1:
        raise click.ClickException(f"--history {path}: expected events of one kind (one input topic), "
                                   f"got {len(topics)} topics")
    return topics.pop(), [(POOL.encode(), value) for _, _, value, _, _ in msgs], results


def slowest_command_ms(s: Settings, since: float) -> float | None:
    """The longest command in Redis's slow log since ``since`` (epoch s) naming this run's keys."""
    with redis.Redis.from_url(s.redis_url, **s.redis_kwargs()) as r:
        entries: list[dict[str, Any]] = r.slowlog_get(1024)  # type: ignore[assignment]
    mine = s.key_prefix.encode()
    durations = [int(e["duration"]) for e in entries
                 if int(e["start_time"]) >= int(since) and mine in _as_bytes(e.get("command", b""))]
    return max(durations) / 1000 if durations else None


def _as_bytes(x: object) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode()


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _redis_cpu(s: Settings) -> float | None:
    """Redis's own CPU seconds so far (``INFO cpu``), None when it does not say."""
    try:
        with redis.Redis.from_url(s.redis_url, **s.redis_kwargs()) as r:
            info: dict[str, Any] = r.info("cpu")  # type: ignore[assignment]
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    except Exception:  # only a figure of the report
        return None


def threads_text(threads: dict[str, dict[str, float]]) -> str:
    """``ThreadTimes`` of the worker leg, the busiest thread first: "name on a core / waiting for a core /
    asleep" (seconds; "asleep" holds up to ``DONE_POLL_S`` of idle time after the end)."""
    out = []
    for name, t in sorted(threads.items(), key=lambda kv: -kv[1]["on_core_s"]):
        if t["on_core_s"] >= 0.05:
            out.append(f"{name} {t['on_core_s']:.1f} on a core / {t['waiting_for_core_s']:.1f} waiting for one / "
                       f"{t['asleep_s']:.1f} asleep")
    return ", ".join(out)


def ratio_floor(run: dict[str, Any]) -> float | None:
    """See ``replay_vs_embedded``: None unless every process's CPU was measured."""
    parts = [run.get(k) for k in ("embedded_cpu_s", "redis_cpu_s", "broker_cpu_s", "publisher_cpu_s")]
    if any(x is None for x in parts) or not run.get("embedded_s"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return sum(float(x) for x in parts if x is not None) / cores / float(run["embedded_s"])


def floor_text(run: dict[str, Any], times: str = "x") -> str:
    """``ratio_floor`` and what it is made of, for the report ("" when it was not measured)."""
    floor = run.get("ratio_floor")
    if floor is None:
        return ""
    return (f" (floor {floor:.2f}{times}: broker {run['broker_cpu_s']:.1f} CPU-s, Redis {run['redis_cpu_s']:.1f}, "
            f"publisher {run['publisher_cpu_s']:.1f}; cores {100 * run['machine_busy']:.0f} % busy)")


def replay_summary(runs: list[dict[str, Any]], times: str = "x") -> str:
    """The median and range of the runs' ratios and walls ("" for fewer than two runs). Why: on a shared
    machine one run does not tell a change of a few per cent from the sitting, a median of several does."""
    if len(runs) < 2:
        return ""

    def spread(key: str, fmt: str) -> str:
        xs = [float(r[key]) for r in runs]
        return f"{median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"

    return (f"{len(runs)} runs: ratio median {spread('ratio', '.2f')}{times}, worker {spread('worker_s', '.1f')} s, "
            f"embedded {spread('embedded_s', '.1f')} s")


def replay_vs_embedded(s: Settings, port: int, worker_pid: int, path: str, system: str, pools: list[str],
                       messages_per_run: int, tmp: Path, broker_pid: int | None = None) -> list[dict[str, Any]]:
    """The same file through ``mmr replay --broker`` into the running, warm worker (one fresh pool per
    run, ``pools``) and through ``mmr replay --embedded``, each a subprocess as a user runs it, alternating
    which goes first. The worker's clock runs until its ``mmr_messages_done`` counts every message (all
    ratings committed to Redis and published). Per run: both walls, their ratio, the CPU of every process
    and the worker's stage means.

    With ``broker_pid`` (a broker the bench started here) also ``ratio_floor``: the ratio the worker leg
    would reach if the worker used no more CPU than the embedded replay and every core were busy, i.e.
    the CPU of the other processes (Redis, broker, publisher) plus the embedded replay's, over the cores,
    over the embedded wall: no change to the worker alone can beat it while they share its cores."""
    mmr = str(Path(sys.executable).parent / "mmr")
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=s.kafka_bootstrap, MMR_TOPIC_MATCHES=s.topic_matches,
               MMR_TOPIC_ROUNDS=s.topic_rounds, MMR_TOPIC_ROUND_RESULTS=s.topic_results,
               MMR_PARTITIONS=str(s.partitions))
    runs = []
    for k, pool in enumerate(pools):
        run: dict[str, Any] = {"pool": pool}
        for leg in ("worker", "embedded") if k % 2 == 0 else ("embedded", "worker"):
            click.echo(f"  run {k + 1}/{len(pools)}: {leg} ...", err=True)
            if leg == "embedded":
                emb = timed([mmr, "replay", path, "--system", system, "--embedded", "--out",
                             str(tmp / "embedded.jsonl"), "--no-progress"], env)
                run.update(embedded_s=emb.wall, embedded_cpu_s=emb.cpu, embedded_peak_rss_mib=emb.max_rss_mib)
                continue
            c0 = _children_cpu()
            target = _metric(port, DONE) + messages_per_run
            stages = _stage_totals(port)
            steps0 = _metric(port, "mmr_batches_total")
            phases0 = {ph: _metric(port, "mmr_step_seconds_sum", phase=ph) for ph in ("rate", "commit")}
            meter = CpuMeter({"worker": worker_pid, **({} if broker_pid is None else {"broker": broker_pid})})
            meter.start()
            r0 = _redis_cpu(s)
            threads = ThreadTimes(worker_pid)
            threads.start()
            t0 = time.perf_counter()
            pub = subprocess.Popen([mmr, "replay", path, "--broker", s.kafka_bootstrap, "--pool", pool,
                                    "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t_end = _wait_done([port], target, 3600)
            run["worker_s"] = t_end - t0
            run["worker_threads"] = threads.stop()
            cpu, r1 = meter.stop(seconds=True), _redis_cpu(s)
            run["publisher_exit_code"] = pub.wait(600)
            run["publisher_cpu_s"] = _children_cpu() - c0
            run["worker_cpu_s"], run["broker_cpu_s"] = cpu.get("worker"), cpu.get("broker")
            run["redis_cpu_s"] = None if r0 is None or r1 is None else r1 - r0
            run["machine_busy"] = cpu.get("machine_busy_share")
            run["worker_stage_means_ms"] = _stage_summary(stages, _stage_totals(port))
            run["worker_peak_rss_mib"] = peak_rss_mib(worker_pid)  # since the worker started (runs before too)
            run["worker_steps"] = _metric(port, "mmr_batches_total") - steps0  # Redis steps committed
            # the steps' ratings and commits in all: the larger bounds the run (``mmr_step_seconds``)
            run["worker_step_phase_s"] = {ph: _metric(port, "mmr_step_seconds_sum", phase=ph) - was
                                          for ph, was in phases0.items()}
        run["ratio"] = run["worker_s"] / run["embedded_s"]
        run["ratio_floor"] = ratio_floor(run)
        # after both clocks: the worker's final state against the embedded replay's output, player by player
        run["players"], run["players_differing"] = differing_rows(tmp / "embedded.jsonl", s, pool)
        runs.append(run)
        same = ("equal to the embedded replay" if not run["players_differing"]
                else f"{run['players_differing']:,} PLAYERS DIFFER from the embedded replay")
        click.echo(f"  run {k + 1}: worker {run['worker_s']:.1f} s, embedded {run['embedded_s']:.1f} s: "
                   f"{run['ratio']:.2f}x; {run['players']:,} players, {same} (the details in the table)", err=True)
    return runs
