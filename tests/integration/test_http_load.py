"""HTTP load beside a stream (issue: requests must not delay rating beyond a bound): a real worker rates
a steady stream of matches in legs without and with 200 clients reading the API as fast as they can
(in turn, three pairs: a machine whose load drifts weighs on both alike); every event is rated and
every request answered (200, or 429 above MMR_HTTP_MAX_REQUESTS). The clients run in a process of
their own (``http_load.py``), not on the loop of the stream's producer. The produce-to-rating
latencies of both kinds of leg, and the CPU each thread of the worker took in each leg, are printed
(``-s``), not asserted: tests never assert timings (docs/operator.md, "The HTTP server is isolated
from rating", holds what was measured)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from service_utils import WorkerProcess, announced_port, make_settings, wait_caught_up

from stream.service.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

POOL = "load"
PLAYERS = 400
BATCHES, PER_BATCH, EVERY_S = 210, 10, 0.05
#: the stream in this many pairs of legs, without and with the clients, in turn
PAIRS = 3
CLIENTS = 200


async def _stream(s: Settings, leg: str, batches: int = BATCHES) -> dict[str, int]:
    """``batches`` batches of matches, one every ``EVERY_S``, each event's ``time`` its produce time (ms)."""
    p = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, enable_idempotence=False, linger_ms=0)
    await p.start()
    sent: dict[str, int] = {}
    try:
        for b in range(batches):
            now = int(time.time() * 1000)
            for i in range(PER_BATCH):
                k = b * PER_BATCH + i
                eid = f"{leg}-{k}"
                event = {"type": "match", "event_id": eid, "pool": POOL, "time": now,
                         "a": f"p{(2 * k) % PLAYERS}", "b": f"p{(2 * k + 1) % PLAYERS}", "score": float(k % 2)}
                await p.send(s.topic_matches, orjson.dumps(event), key=POOL.encode())
                sent[eid] = now
            await p.flush()
            await asyncio.sleep(EVERY_S)
    finally:
        await p.stop()
    return sent


def _load(port: int) -> subprocess.Popen[str]:
    """``CLIENTS`` clients reading the API as fast as they can, in a process of their own (``http_load.py``)
    until its stdin closes; it then prints the statuses it got. Why a process: 200 clients on the test's
    own event loop would delay the stream's producer on that loop, and the latency measured would be the
    load generator's, not the worker's."""
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("http_load.py")), str(port), POOL,
                             str(PLAYERS), str(CLIENTS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


async def _latencies(s: Settings, sent: dict[str, int]) -> list[int]:
    """ms from each event's produce to the publish of the rating citing it (the rating record's timestamp)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: list[int] = []
    try:
        tps = [TopicPartition(s.topic_ratings, p) for p in range(s.partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        remaining = {tp for tp in tps if ends[tp] > 0}
        while remaining:
            for tp, records in (await consumer.getmany(timeout_ms=500, max_records=10000)).items():
                for r in records:
                    o = orjson.loads(r.value or b"{}")
                    if o.get("event_id") in sent:
                        out.append(r.timestamp - sent[o["event_id"]])
                if records and records[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return out


def _thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each named thread of process ``pid`` (Linux ``/proc``; the threads
    of one name summed: the main thread is the process's name)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended meanwhile
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _cpu_during(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    used = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return ", ".join(f"{k} {v / seconds:.0%}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v >= 0.05)


def _quantiles(xs: list[int]) -> str:
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    return f"n={len(xs)} p50={pick(0.5)} ms p99={pick(0.99)} ms max={xs[-1]} ms over 1 s: {sum(x > 1000 for x in xs)}"


def _leg(s: Settings, pid: int, port: int | None, name: str) -> tuple[dict[str, int], str, dict[int, int]]:
    """One leg of ``BATCHES // PAIRS`` batches: (events sent, the worker threads' CPU, the statuses of the
    clients' requests), with ``CLIENTS`` clients reading the API on ``port`` (None: without)."""
    batches = BATCHES // PAIRS
    if port is None:
        cpu0, t0 = _thread_cpu(pid), time.monotonic()
        sent = asyncio.run(_stream(s, name, batches))
        return sent, _cpu_during(cpu0, _thread_cpu(pid), time.monotonic() - t0), {}
    load = _load(port)
    try:
        time.sleep(2.0)  # the clients at full speed first
        cpu0, load0, t0 = _thread_cpu(pid), _thread_cpu(load.pid), time.monotonic()
        sent = asyncio.run(_stream(s, name, batches))
        took = time.monotonic() - t0
        cpu = _cpu_during(cpu0, _thread_cpu(pid), took)
        cpu += f"; the clients' process {(sum(_thread_cpu(load.pid).values()) - sum(load0.values())) / took:.0%}"
    finally:
        statuses = {int(k): v for k, v in orjson.loads(load.communicate(timeout=120)[0]).items()}
    return sent, cpu, statuses


def test_http_load_beside_a_stream(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    s = make_settings(kafka_bootstrap, redis_url, system="elo-mmx")
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    try:
        port = announced_port(worker)
        asyncio.run(_stream(s.with_(), "warm"))
        wait_caught_up(s, worker, timeout=240)
        assert worker.proc is not None
        pid = worker.proc.pid

        quiet: dict[str, int] = {}
        busy: dict[str, int] = {}
        statuses: dict[int, int] = {}
        notes = []
        for k in range(PAIRS):  # alternating legs: a machine whose load drifts weighs on both alike
            sent, cpu, _ = _leg(s, pid, None, f"quiet{k}")
            quiet.update(sent)
            notes.append(f"  leg {2 * k + 1}, without: worker threads' CPU {cpu}")
            wait_caught_up(s, worker, timeout=240)
            sent, cpu, got = _leg(s, pid, port, f"loaded{k}")
            busy.update(sent)
            for status, n in got.items():
                statuses[status] = statuses.get(status, 0) + n
            notes.append(f"  leg {2 * k + 2}, with: {sum(got.values())} requests; worker threads' CPU {cpu}")
            wait_caught_up(s, worker, timeout=240)
        assert worker.alive()
        assert set(statuses) <= {200, 429} and statuses.get(200), statuses
        lat_quiet, lat_busy = asyncio.run(_latencies(s, quiet)), asyncio.run(_latencies(s, busy))
        # every event rated: each is cited by the rating of one of its players at least (a player's last match)
        assert lat_quiet and lat_busy
        print("\n" + "\n".join(notes) + f"\nwithout HTTP load: {_quantiles(lat_quiet)}\nwith {CLIENTS} clients "
              f"({sum(statuses.values())} requests, {statuses}): {_quantiles(lat_busy)}")
    finally:
        worker.stop()
