"""Redis credentials changed under a running ``mmr worker`` (real processes: the broker, a private
``redis-server``): the worker's password changed (``CONFIG SET requirepass``) or its ACL user's password
reset (``ACL SETUSER``), and the worker's connections closed (``CLIENT KILL``), as a restart of Redis or
a connection that drops would. Waiting does not fix refused credentials, so the worker does not retry
them as an outage: one ERROR line naming authentication and Redis's address (secrets masked),
``/readyz`` 503 with that reason while it stops, exit status 1; no secret in any line it wrote; what it
acknowledged before is in Redis (docs/operator.md, "Redis refused the credentials").

The worker stops right after the refusal, too soon for a probe from outside to be sure to
see readiness name it: ``test_readiness_names_the_refused_credentials`` checks that on a worker built
in the test's process (``create_app``: its store, its HTTP API) with its stop swapped for a flag."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
import redis
from local_servers import RedisServer
from service_utils import WorkerProcess, announced_port, export_state, http_get, make_settings, wait_caught_up

from stream.client import Publisher
from stream.service.app import create_app
from stream.service.config import Settings
from stream.state.redis_client import CredentialsRefused

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OLD = "old-Redis-pw-4417"
NEW = "new-Redis-pw-9120"


async def _publish(s: Settings, first: int, n: int) -> None:
    async with Publisher(settings=s) as pub:
        for k in range(first, first + n):
            await pub.match("chess", f"p{k % 7}", f"p{(k + 3) % 7}", 1.0, time=k)


@pytest.mark.parametrize("how", ["url, requirepass", "password file, acl"])
def test_credentials_changed_under_the_worker_stop_it_with_one_line(kafka_bootstrap: str, private_redis: RedisServer,
                                                                   tmp_path: Path, how: str) -> None:
    admin = redis.Redis(port=private_redis.port)
    admin.config_set("requirepass", OLD)
    admin = redis.Redis(port=private_redis.port, password=OLD)
    address = f"127.0.0.1:{private_redis.port}/0"
    if how.startswith("url"):
        s = make_settings(kafka_bootstrap, f"redis://:{OLD}@{address}", system="elo", log_level="info")
        extra: dict[str, str] = {}
        shown = f"Redis at redis://:**********@{address}: authentication failed"
    else:
        secret = tmp_path / "redis-password"
        secret.write_text(OLD + "\n")
        s = make_settings(kafka_bootstrap, f"redis://{address}", system="elo", log_level="info")
        extra = {"MMR_REDIS_PASSWORD_FILE": str(secret)}
        shown = f"Redis at redis://{address}: authentication failed"
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.extra_env = extra
    worker.start()
    try:
        port = announced_port(worker)
        asyncio.run(_publish(s, 0, 40))
        wait_caught_up(s, worker)
        rated = export_state(s.with_(redis_url=f"redis://:{OLD}@{address}"))
        assert sum(1 for (pool, _) in rated if pool == "chess") == 7

        if how.startswith("url"):
            admin.config_set("requirepass", NEW)
        else:
            admin.acl_setuser("default", enabled=True, reset_passwords=True, passwords=[f"+{NEW}"])
        admin = redis.Redis(port=private_redis.port, password=NEW)
        changed = time.monotonic()
        admin.client_kill_filter(_type="normal", skipme=True)
        asyncio.run(_publish(s, 40, 20))  # a batch to commit: the worker meets the refusal at once

        answers: list[tuple[int, object]] = []
        while worker.alive() and time.monotonic() - changed < 60:
            with contextlib.suppress(OSError):  # the HTTP server closed as the worker ends
                answers.append(http_get(port, "/readyz", timeout=2.0))
            time.sleep(0.02)
        code = worker.proc.wait(30) if worker.proc is not None else None
        stopped = time.monotonic() - changed
    finally:
        worker.stop()
    log = worker.log_path.read_text(errors="replace")
    print(f"{how}: the worker stopped {stopped:.1f} s after the change, exit {code}, {len(answers)} readiness answers")
    assert code == 1, log[-4000:]
    errors = [line for line in log.splitlines() if "[ERROR]" in line or '"level": "ERROR"' in line]
    refused = [line for line in errors if "authentication failed" in line]
    assert len(refused) == 1 and shown in refused[0] and "the worker stops" in refused[0], errors
    assert "retrying the batch" not in log  # not retried as an outage
    assert answers and all(status == 503 for status, _ in answers), answers  # never ready again
    assert OLD not in log and NEW not in log
    assert all(OLD not in str(a) and NEW not in str(a) for a in answers)
    # the state the worker committed before is intact (nothing half-done: the next owner rates the rest)
    s_new = s.with_(redis_url=f"redis://:{NEW}@{address}")
    assert {k: v for k, v in export_state(s_new).items() if k in rated}.keys() == rated.keys()


def test_readiness_names_the_refused_credentials(private_redis: RedisServer) -> None:
    admin = redis.Redis(port=private_redis.port)
    admin.config_set("requirepass", OLD)
    admin = redis.Redis(port=private_redis.port, password=OLD)
    address = f"127.0.0.1:{private_redis.port}/0"
    s = make_settings("127.0.0.1:1", f"redis://:{OLD}@{address}", system="elo", redis_cluster=False)
    stops: list[str | None] = []

    async def run() -> tuple[int, object]:
        svc = create_app(s)
        svc.on_fatal = lambda: stops.append(svc.fatal)
        svc.running = True  # as once Faust started (readiness answers "starting" before)
        try:
            await svc.serve_http()
            assert await svc.store.ping()
            admin.config_set("requirepass", NEW)
            redis.Redis(port=private_redis.port, password=NEW).client_kill_filter(_type="normal", skipme=True)
            for _ in range(2):  # refused again: one line, one stop
                with pytest.raises(CredentialsRefused):
                    await svc.store.ping()
            port = svc.http_port
            assert port is not None
            return await asyncio.get_running_loop().run_in_executor(None, http_get, port, "/readyz")
        finally:
            await svc.close()

    status, body = asyncio.run(run())
    assert len(stops) == 1 and stops[0] is not None
    assert stops[0].startswith(f"Redis at redis://:**********@{address}: authentication failed: wrong password")
    assert status == 503 and isinstance(body, dict) and body["reason"] == stops[0], body
    assert OLD not in str(body) and NEW not in str(body)
