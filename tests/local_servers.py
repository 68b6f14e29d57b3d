"""Servers of a test's own on free local ports: a free port, waiting for a port, and a ``redis-server``
in a folder of its own that a test can SIGKILL (a crash) and start again on the same port and folder.

    server = RedisServer(tmp_path / "redis", *AOF_ALWAYS)   # or the ``private_redis`` fixture (conftest)
    server.start()
    server.url      # redis://127.0.0.1:<port>/0
    server.kill()   # SIGKILL: what it had not written to its AOF is lost
    server.start()  # again, from what its folder holds
    server.stop()

Its log is ``redis.log`` in its folder.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest
import redis

#: an AOF written and fsynced with every write: a kill loses nothing the server acknowledged
AOF_ALWAYS = ("--appendonly", "yes", "--appendfsync", "always")
#: no persistence at all
NO_AOF = ("--appendonly", "no")


def test_redis_db() -> int:
    """The Redis DB index of this test process: ``MMR_TEST_REDIS_DB`` (13) for a serial run; under
    pytest-xdist worker ``gwN`` takes that minus N, so that each process flushes a DB of its own."""
    base = int(os.environ.get("MMR_TEST_REDIS_DB", "13"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    db = base - int(worker[2:]) if worker.startswith("gw") else base
    if db < 0:
        raise pytest.UsageError(f"MMR_TEST_REDIS_DB={base} leaves no Redis DB for xdist worker {worker}: "
                                "set it to at least the number of workers minus one")
    return db


#: the lowest port ``free_port`` hands out (above the well-known and most registered services)
PORTS_FROM = 10000
#: the slices of the ports below the ephemeral range: one per Redis DB index (Redis' default 16)
PORT_SLICES = 16
_handed_out: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _port_slice() -> range:
    """The ports this process picks from: below the kernel's ephemeral range, so that no client
    connection (whose local port the kernel picks from that range) nor any port-0 bind of another
    program holds one, and within that a slice of its own named by its Redis DB index, which is unique
    per concurrent test process on a machine (each run has its DBs, each xdist worker one of them), so
    that two such processes never pick the same port."""
    width = (_ephemeral_start() - PORTS_FROM) // PORT_SLICES
    if width < 64:
        return range(0)
    first = PORTS_FROM + (test_redis_db() % PORT_SLICES) * width
    return range(first, first + width)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing holds now, for a server about to start. Picked from this process's slice of the
    ports below the ephemeral range (``_port_slice``), never twice in one process (a port handed out may
    not be bound yet); the system's pick of a free port where the ephemeral range leaves no room below.
    Another program may still bind it first: a server that fails to bind it is started again on another
    (``RedisServer.start``, ``LocalCluster``, the broker fixture)."""
    ports = _port_slice()
    if ports:
        for _ in range(200):
            port = random.choice(ports)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
        _handed_out.clear()  # the slice used up (a very long session): ports handed out long ago are free again
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Until something listens on ``host:port``; fails after ``timeout`` s, or at once when ``proc`` exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout} s")


def port_taken(log: Path, offset: int = 0) -> bool:
    """Whether the Redis log ``log`` (from byte ``offset`` on) says its server could not bind its port."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return False
    return "Address already in use" in text


def redis_server_binary() -> str:
    """``redis-server`` from PATH; the test is skipped without one."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server not on PATH")
    return binary


class RedisServer:
    """A ``redis-server`` of a test's own in folder ``data`` (created), with ``args`` beside its port, its
    folder and ``--save ""`` (no RDB snapshots)."""

    def __init__(self, data: Path, *args: str, binary: str | None = None) -> None:
        self.binary = binary or redis_server_binary()
        self.data, self.args, self.port = data, args, free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = False  # once: a start again keeps the port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> None:
        """Start it and wait until it answers a PING (so it has loaded its AOF, if it has one). Its first
        start moves to another port when another program bound the one picked (``free_port``) first; a
        start again keeps the port, which its clients name."""
        deadline = time.monotonic() + timeout
        while not self._start_once(deadline):
            if self.started:
                raise RuntimeError(f"redis-server could not bind port {self.port} again; see {self.data / 'redis.log'}")
            self.port = free_port()
        self.started = True

    def _start_once(self, deadline: float) -> bool:
        """False when the server exited at start because its port is taken."""
        self.data.mkdir(parents=True, exist_ok=True)
        log_path = self.data / "redis.log"
        logged = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                          "--dir", str(self.data), *self.args], stdout=log, stderr=subprocess.STDOUT)
        while True:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                if port_taken(log_path, logged):
                    return False
                raise RuntimeError(f"redis-server exited with {code}; see {log_path}")
            client = redis.Redis(port=self.port, socket_connect_timeout=1)
            try:
                # the PID: a server another program started on this port first answers too
                if client.ping() and client.info("server")["process_id"] == self.proc.pid:
                    return True
            except redis.RedisError:  # not listening yet, or loading its AOF
                if time.monotonic() > deadline:
                    raise
            finally:
                client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"another server answers on port {self.port}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, and wait until it is gone."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        """SIGTERM (SIGKILL if it does not exit within 10 s)."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
