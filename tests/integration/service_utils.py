"""Helpers of the service integration tests: settings per test, the worker subprocess, waiting, reading."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from history_sink import history_lines

from stream.engine.embedded import EmbeddedPipeline
from stream.events.inputs import read_records
from stream.service.config import PoolConfig, Settings
from stream.service.export import export_rows
from stream.service.metrics import Metrics
from stream.state.redis_store import RedisStore

ROOT = Path(__file__).resolve().parents[2]
MMR = ROOT / ".venv" / "bin" / "mmr"

T = TypeVar("T")


def make_settings(kafka: str, redis_url: str, **over: Any) -> Settings:
    """Unique topics, group and key prefix per test: tests share one broker and one Redis DB."""
    tag = uuid.uuid4().hex[:8]
    s = Settings(
        kafka_bootstrap=kafka, redis_url=redis_url, app_id=f"mmr-test-{tag}", topic_matches=f"t{tag}-matches",
        topic_rounds=f"t{tag}-rounds", topic_results=f"t{tag}-results", topic_ratings=f"t{tag}-ratings",
        topic_dead=f"t{tag}-dead", partitions=2, key_prefix=f"mmr-{tag}", http_port=0, log_level="warning",
    )
    return s.with_(**over)


def pool_systems(systems: Mapping[str, str]) -> dict[str, PoolConfig]:
    """``Settings.pools`` that rate each pool of ``systems`` (pool -> system name) with its defaults."""
    return {pool: PoolConfig(name) for pool, name in systems.items()}


def env_for(s: Settings, **extra: str) -> dict[str, str]:
    """The environment of an ``mmr`` subprocess that runs with ``s`` (plus ``extra``); the settings' pools
    in a pools file of their own (``MMR_POOLS_FILE``), unless ``extra`` names one."""
    env = {**os.environ, **s.to_env(), **extra}
    if s.pools and "MMR_POOLS_FILE" not in extra:
        text = json.dumps({"pools": {p: {"system": c.system, "params": c.params} for p, c in sorted(s.pools.items())}})
        path = Path(tempfile.gettempdir()) / f"mmr-test-pools-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
        if not path.exists():  # written whole, then named: a subprocess started meanwhile never reads half of it
            part = path.with_suffix(f".{os.getpid()}.part")
            part.write_text(text)
            os.replace(part, path)
        env["MMR_POOLS_FILE"] = str(path)
    return env


class WorkerProcess:
    """``mmr worker`` as a subprocess (so that SIGKILL is a real crash)."""

    def __init__(self, s: Settings, log_path: Path, *args: str) -> None:
        self.s = s
        self.log_path = log_path
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra_env: dict[str, str] = {}
        #: options of tests/faults.py (``--crash-after-batches N``, ``--rating-bug-pool POOL``): the worker
        #: runs with those faults installed
        self.faults: list[str] = []

    def start(self) -> Self:
        log = self.log_path.open("ab")
        env = env_for(self.s, **self.extra_env)
        command = [sys.executable, str(ROOT / "tests" / "faults.py"), *self.faults] if self.faults else [str(MMR)]
        self.proc = subprocess.Popen([*command, "worker", *self.args], env=env, stdout=log,
                                     stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n:]


async def _offsets(s: Settings, topics: Sequence[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """Per partition of ``topics``: (committed offset of the worker's group, end offset)."""
    # A consumer of the worker's group that never subscribes: it only asks for committed offsets
    # (the admin client's OffsetFetch does not decode against Tansu 0.6).
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False, group_id=s.app_id)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(s.partitions)]
        ends = await consumer.end_offsets(tps)
        return {(tp.topic, tp.partition): (await consumer.committed(tp) or 0, ends[tp]) for tp in tps}
    finally:
        await consumer.stop()


def offsets(s: Settings, topic: str) -> dict[int, tuple[int, int]]:
    """Per partition of ``topic``: (committed offset of the worker's group, end offset)."""
    return {p: v for (_, p), v in asyncio.run(_offsets(s, [topic])).items()}


def _lag(s: Settings) -> int:
    """Sum over input partitions of (end offset − committed offset of the worker's group)."""
    return sum(max(end - done, 0) for done, end in asyncio.run(_offsets(s, s.input_topics())).values())


def wait_caught_up(s: Settings, worker: WorkerProcess | None = None, timeout: float = 120.0) -> None:
    """Until the worker's group has committed every input offset (so everything was applied). A poll
    the broker fails (a request timing out on a loaded machine, the group rebalancing) counts as not
    yet: the next poll asks again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lag: int | str = _lag(s)
        except KafkaError as exc:
            lag = f"unknown ({exc!r})"
        if lag == 0:
            return
        if worker is not None and not worker.alive():
            raise AssertionError(f"worker exited:\n{worker.log_tail()}")
        if time.monotonic() > deadline:
            tail = worker.log_tail() if worker is not None else ""
            raise AssertionError(f"lag still {lag} after {timeout} s\n{tail}")
        time.sleep(0.5)


def announced_port(worker: WorkerProcess, timeout: float = 120.0) -> int:
    """The port of the worker's HTTP API as it printed it at start. A worker started with
    ``MMR_HTTP_PORT`` 0 binds a port the system picks as it binds: a port chosen beforehand
    (``free_port``), or one a stopped worker used, can be taken by another process before a new
    worker gets to bind it, and that worker then exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"HTTP API on http://127\.0\.0\.1:(\d+)", worker.log_path.read_text(errors="replace"))
        if m:
            return int(m.group(1))
        if not worker.alive():
            raise AssertionError(f"worker exited before announcing its HTTP port:\n{worker.log_tail()}")
        time.sleep(0.2)
    raise AssertionError(f"no HTTP port announced after {timeout} s:\n{worker.log_tail()}")


def wait_for(what: str, check: Callable[[], T], worker: WorkerProcess | None = None, timeout: float = 120.0,
             every: float = 0.2) -> T:
    """``check()`` once it is truthy (polled every ``every`` s); fails naming ``what`` after ``timeout``
    s, or at once with its log when ``worker`` exited. An ``OSError`` of ``check`` (a worker whose HTTP
    API does not answer yet) or a ``KafkaError`` (a poll of the broker that failed) counts as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except (OSError, KafkaError):
            got = None
        if got:
            return got
        if worker is not None and not worker.alive():
            raise AssertionError(f"worker exited while waiting for {what}:\n{worker.log_tail()}")
        if time.monotonic() > deadline:
            tail = worker.log_tail() if worker is not None else ""
            raise AssertionError(f"no {what} after {timeout} s\n{tail}")
        time.sleep(every)


def http_get(port: int, path: str, timeout: float = 10.0) -> tuple[int, Any]:
    """(status, body) of ``GET path`` on the worker's HTTP API: the body decoded when it is JSON, text
    otherwise, also for an error status."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            status, body, kind = resp.status, resp.read(), resp.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        status, body, kind = exc.code, exc.read(), exc.headers.get_content_type()
    return status, orjson.loads(body) if kind == "application/json" else body.decode()


def metric(port: int, name: str) -> float:
    """The sum of every series of the worker's metric ``name`` (``/metrics`` of the HTTP API on
    ``port``); a series alone when ``name`` has its labels (``name{label="value",...}``); 0 when absent."""
    _, text = http_get(port, "/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")))


def sample(metrics: Metrics, name: str) -> float:
    """The value of the unlabelled metric ``name`` (a counter's with ``_total``) in a processor's own registry,
    as ``/metrics`` would export it; fails on a name it does not export, so no check passes on a misspelt one."""
    value = metrics.registry.get_sample_value(name)
    assert value is not None, f"no metric {name}"
    return value


class BackgroundPublish:
    """``publish`` on a thread of its own: a stream of events while a test kills and restarts things."""

    def __init__(self, paths: list[Path], s: Settings, **kw: Any) -> None:
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(paths, s, kw), daemon=True)

    def _run(self, paths: list[Path], s: Settings, kw: dict[str, Any]) -> None:
        try:
            publish(paths, s, **kw)
        except BaseException as exc:  # pragma: no cover - raised by join
            self.errors.append(exc)

    def start(self) -> BackgroundPublish:
        self.thread.start()
        return self

    def is_alive(self) -> bool:
        return self.thread.is_alive()

    def join(self) -> None:
        """Wait until everything is published; raise what publishing raised."""
        self.thread.join()
        if self.errors:
            raise self.errors[0]


async def _read_topic(s: Settings, topic: str) -> list[tuple[bytes | None, bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(s.partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[tuple[bytes | None, bytes]] = []
        remaining = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + 60
        while remaining and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=10000)
            for tp, records in batches.items():
                out.extend((r.key, r.value or b"") for r in records)
                if records and records[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
        return out
    finally:
        await consumer.stop()


def read_topic(s: Settings, topic: str) -> list[tuple[bytes | None, bytes]]:
    return asyncio.run(_read_topic(s, topic))


def read_json_topic(s: Settings, topic: str) -> list[dict[str, Any]]:
    return [orjson.loads(v) for _, v in read_topic(s, topic)]


async def _produce_raw(s: Settings, topic: str, items: Sequence[tuple[bytes | None, bytes]]) -> None:
    from aiokafka import AIOKafkaProducer

    from stream.service.topics import ensure_topics

    await ensure_topics(s)
    p = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, enable_idempotence=False)
    await p.start()
    try:
        for key, value in items:
            await p.send_and_wait(topic, value, key=key)
    finally:
        await p.stop()


def produce_raw(s: Settings, topic: str, items: Sequence[tuple[bytes | None, bytes]]) -> None:
    asyncio.run(_produce_raw(s, topic, items))


async def _export(s: Settings) -> list[dict[str, Any]]:
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix)
    try:
        return await export_rows(store)
    finally:
        await store.close()


def export_state(s: Settings) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["pool"], r["player"]): r for r in asyncio.run(_export(s))}


def embedded_state(paths: list[Path], system: str, pool_systems: dict[str, tuple[str, dict[str, Any]]] | None = None,
                   batch_size: int = 4096, history: list[dict[str, Any]] | None = None,
                   ) -> dict[tuple[str, str], dict[str, Any]]:
    """The final ratings of the embedded replay; ``history``: gets its rating messages (``--history``)."""
    pipe = EmbeddedPipeline(system, {}, pool_systems=pool_systems, batch_size=batch_size,
                            history=None if history is None else history_lines(history))
    for p in paths:
        pipe.run(read_records(p))
    return {(r["pool"], r["player"]): r for r in pipe.final_ratings()}


def synth(tmp: Path, name: str, *args: str) -> Path:
    out = tmp / name
    subprocess.run([str(MMR), "synth", *args, "--out", str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return out


def publish(paths: list[Path], s: Settings, **kw: Any) -> dict[tuple[str, int], int]:
    from stream.tools.publish import publish_history

    return publish_history(tuple(str(p) for p in paths), s.kafka_bootstrap, progress=False, settings=s, **kw)

