"""A wrong Redis password, an unreachable broker, a bad SASL setting: ``mmr`` ends at once with one line
naming the component, its address (secrets masked) and the cause, and a non-zero exit; no secret in any
line these runs write (issue: errors a person can act on).

Real processes: ``mmr`` as a subprocess, a redis-server of the module's own with ``--requirepass``, the
session's broker. Each run's wall time is recorded (``Run.seconds``) for the report, not asserted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from local_servers import RedisServer, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PASSWORD = "s3cret-Redis-pw"
WRONG = "wrong-Redis-pw"
QUERY_WRONG = "wrong-in-the-query"
FILE_WRONG = "wrong-from-a-file"
SASL_PASSWORD = "s3cret-sasl-pw"
SECRETS = (PASSWORD, WRONG, QUERY_WRONG, FILE_WRONG, SASL_PASSWORD)


@dataclass
class Run:
    code: int
    output: str  # stdout and stderr
    seconds: float

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.output.splitlines() if ln.strip()]


def _mmr(args: list[str], env: dict[str, str], cwd: Path) -> Run:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MMR_", "REDIS_", "KAFKA_"))}
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "stream.cli", *args], env={**base, **env}, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return Run(done.returncode, done.stdout, time.monotonic() - t0)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the module's own that requires ``PASSWORD`` (set once it answers: the helper's
    start-up check pings without one)."""
    with RedisServer(tmp_path_factory.mktemp("redis-auth")) as server:
        client = redis.Redis(port=server.port)
        client.config_set("requirepass", PASSWORD)
        client.close()
        yield server


@pytest.fixture(scope="module")
def runs(redis_server: RedisServer, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every scenario run once: name -> what ``mmr`` did."""
    tmp = tmp_path_factory.mktemp("infra-errors")
    port = redis_server.port
    url_file = tmp / "redis-url"
    url_file.write_text(f"redis://:{FILE_WRONG}@127.0.0.1:{port}/0\n")
    pw_file = tmp / "redis-password"
    pw_file.write_text(f"{FILE_WRONG}\n")
    history = tmp / "matches.jsonl"
    history.write_text('{"type":"match","event_id":"e1","pool":"p","time":1,"a":"x","b":"y","score":1}\n')
    good = {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "MMR_REDIS_PASSWORD": PASSWORD,
            "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "MMR_HTTP_PORT": "0"}
    scenarios: dict[str, tuple[list[str], dict[str, str]]] = {
        "wrong password": (["worker"], {**good, "MMR_REDIS_PASSWORD": "", "REDIS_URL": f"redis://:{WRONG}@127.0.0.1:{port}/0"}),
        "wrong password, no cluster detection": (
            ["worker"], {**good, "MMR_REDIS_PASSWORD": "", "MMR_REDIS_CLUSTER": "0",
                         "REDIS_URL": f"redis://:{WRONG}@127.0.0.1:{port}/0"}),
        "wrong password in the query": (
            ["worker"], {**good, "MMR_REDIS_PASSWORD": "", "REDIS_URL": f"redis://127.0.0.1:{port}/0?password={QUERY_WRONG}"}),
        "wrong password in REDIS_URL_FILE": (["worker"], {**good, "MMR_REDIS_PASSWORD": "", "REDIS_URL": "",
                                                           "REDIS_URL_FILE": str(url_file)}),
        "wrong password in MMR_REDIS_PASSWORD_FILE": (["worker"], {**good, "MMR_REDIS_PASSWORD": "",
                                                                   "MMR_REDIS_PASSWORD_FILE": str(pw_file)}),
        "no password": (["worker"], {**good, "MMR_REDIS_PASSWORD": ""}),
        "export, wrong password": (["export", "--out", str(tmp / "out.jsonl")],
                                   {**good, "MMR_REDIS_PASSWORD": WRONG}),
        "unreachable broker": (["worker"], {**good, "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"}),
        "bad SASL setting": (["worker"], {**good, "MMR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                                          "MMR_KAFKA_SASL_USERNAME": "mmr", "MMR_KAFKA_SASL_PASSWORD": SASL_PASSWORD}),
        "replay, bad SASL setting": (["replay", str(history), "--broker", "--no-progress"],
                                     {**good, "MMR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                                      "MMR_KAFKA_SASL_USERNAME": "mmr", "MMR_KAFKA_SASL_PASSWORD": SASL_PASSWORD}),
        "replay, unreachable broker": (["replay", str(history), "--broker", f"127.0.0.1:{free_port()}",
                                        "--no-progress"], good),
        "wrong password, --debug": (["--debug", "worker"], {**good, "MMR_REDIS_PASSWORD": WRONG}),
        "wrong password, MMR_LOG_LEVEL=debug": (["export", "--out", str(tmp / "out.jsonl")],
                                                {**good, "MMR_REDIS_PASSWORD": WRONG, "MMR_LOG_LEVEL": "debug"}),
    }
    out = {name: _mmr(args, env, tmp) for name, (args, env) in scenarios.items()}
    for name, run in out.items():  # the figures for the report: pytest -s shows them
        print(f"{name}: exit {run.code} after {run.seconds:.2f} s")
    return out


def _one_line(run: Run) -> str:
    assert run.code == 1, run.output
    assert len(run.lines) == 1 and "Traceback" not in run.output, run.output
    return run.lines[0]


@pytest.mark.parametrize("name", ["wrong password", "wrong password, no cluster detection",
                                  "wrong password in REDIS_URL_FILE", "wrong password in MMR_REDIS_PASSWORD_FILE",
                                  "export, wrong password"])
def test_a_wrong_redis_password_is_one_line_naming_authentication(runs: dict[str, Run], redis_server: RedisServer,
                                                                  name: str) -> None:
    line = _one_line(runs[name])
    assert line.startswith("mmr: Redis at redis://") and f"127.0.0.1:{redis_server.port}/0" in line, line
    assert "authentication failed: wrong password or user" in line, line


def test_a_password_in_the_urls_query_is_masked(runs: dict[str, Run], redis_server: RedisServer) -> None:
    line = _one_line(runs["wrong password in the query"])
    assert f"Redis at redis://127.0.0.1:{redis_server.port}/0?password=**********: authentication failed" in line


def test_a_missing_password_says_so(runs: dict[str, Run]) -> None:
    line = _one_line(runs["no password"])
    assert line.startswith("mmr: Redis at ") and "authentication required" in line, line


@pytest.mark.parametrize("name", ["unreachable broker", "replay, unreachable broker"])
def test_an_unreachable_broker_is_one_line(runs: dict[str, Run], name: str) -> None:
    line = _one_line(runs[name])
    assert line.startswith("mmr: Kafka at 127.0.0.1:") and ": unreachable" in line, line


@pytest.mark.parametrize("name", ["bad SASL setting", "replay, bad SASL setting"])
def test_a_bad_sasl_setting_is_one_line_naming_sasl(runs: dict[str, Run], kafka_bootstrap: str, name: str) -> None:
    line = _one_line(runs[name])
    assert line.startswith(f"mmr: Kafka at {kafka_bootstrap}: SASL refused") and "SASL_PLAINTEXT" in line, line


@pytest.mark.parametrize("name", ["wrong password, --debug", "wrong password, MMR_LOG_LEVEL=debug"])
def test_the_traceback_only_when_asked_for(runs: dict[str, Run], name: str) -> None:
    run = runs[name]
    assert run.code != 0 and "Traceback" in run.output and "ConnectError: Redis at" in run.output, run.output


def test_no_run_writes_a_secret(runs: dict[str, Run]) -> None:
    leaks = {name: [s for s in SECRETS if s in run.output] for name, run in runs.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    assert all(run.output for run in runs.values())  # each said something: the grep read real output


def test_a_worker_with_the_right_password_rates_and_logs_no_secret(redis_server: RedisServer, kafka_bootstrap: str,
                                                                  tmp_path: Path) -> None:
    """The checks pass the right credentials (here a password in the URL's query, as redis-py reads it), and
    a worker logging at debug level, which rates a few matches, writes no secret."""
    import asyncio

    from service_utils import WorkerProcess, make_settings, wait_caught_up

    from stream.client import Publisher

    url = f"redis://127.0.0.1:{redis_server.port}/0?password={PASSWORD}"
    s = make_settings(kafka_bootstrap, url, log_level="debug", system="elo")
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    try:
        async def publish() -> None:
            async with Publisher(settings=s) as pub:
                for k in range(20):
                    await pub.match("chess", f"p{k % 5}", f"p{(k + 1) % 5}", 1.0, time=k)

        asyncio.run(publish())
        wait_caught_up(s, worker)
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert "HTTP API on" in log and PASSWORD not in log
    assert f"password={PASSWORD}" not in log
