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


def free_port() -> int:
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

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> None:
        """Start it and wait until it answers a PING (so it has loaded its AOF, if it has one)."""
        self.data.mkdir(parents=True, exist_ok=True)
        with (self.data / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                          "--dir", str(self.data), *self.args], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; see {self.data / 'redis.log'}")
            client = redis.Redis(port=self.port, socket_connect_timeout=1)
            try:
                if client.ping():
                    return
            except redis.RedisError:  # not listening yet, or loading its AOF
                if time.monotonic() > deadline:
                    raise
            finally:
                client.close()
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
