"""A real Redis Cluster on local ports for tests: ``redis-server --cluster-enabled yes`` per node,
each in its own folder, joined with ``redis-cli --cluster create``, torn down after.

    with LocalCluster(tmp_path, masters=3, replicas=0) as cluster:
        cluster.url            # redis://127.0.0.1:<first node>: what REDIS_URL would name
        cluster.masters()      # [(host, port, node id)] of the current masters
        cluster.kill(i)        # SIGKILL node i (a failover test: with replicas, one is promoted)
        cluster.pause(i) / cluster.resume(i)   # SIGSTOP / SIGCONT node i (a replica that falls behind)
        cluster.replicas_of(i) # indexes of the replicas of master i
        cluster.move_slot(slot, dst_port)   # migrate one slot with its keys (MOVED afterwards)

Every node gets its own ``--pidfile`` (the default is a shared system path) and a free cluster bus
port (``--cluster-port``), so parallel test runs do not meet. The nodes are children of the test (not
daemons), so a node that cannot bind its port is seen exiting and started again on other ports.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import redis
from local_servers import free_port, port_taken
from redis.backoff import NoBackoff
from redis.retry import Retry


def available() -> bool:
    return shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None


class LocalCluster:
    def __init__(self, root: Path, masters: int = 3, replicas: int = 0, timeout: float = 20.0,
                 node_timeout_ms: int = 2000) -> None:
        self.root = root
        #: ``cluster-node-timeout``: how long a master is unreachable before its replica is promoted
        self.node_timeout_ms = node_timeout_ms
        self.n_masters = masters
        self.replicas = replicas
        self.timeout = timeout
        self.ports: list[int] = []
        self.dirs: list[Path] = []
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def node(self, i: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.ports[i], socket_connect_timeout=2, socket_timeout=10,
                           retry=Retry(NoBackoff(), 0))

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        for i in range(self.n_masters * (1 + self.replicas)):
            d = self.root / f"node{i}"
            d.mkdir(parents=True, exist_ok=True)
            self.dirs.append(d)
            self.ports.append(0)
            # another program may bind a port picked by free_port first: the node moves to other ports
            while not self._start_node(i, free_port(), free_port()):
                pass
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        subprocess.run(["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", str(self.replicas)],
                       input=b"yes\n", check=True, stdout=subprocess.DEVNULL, timeout=self.timeout)
        self.wait_ok()
        self._wait(self._replicas_linked)

    def _start_node(self, i: int, port: int, bus: int) -> bool:
        """Start node ``i`` on ``port`` (and cluster bus port ``bus``) and wait until it answers a PING;
        False when it exited because one of its ports is taken."""
        d = self.dirs[i]
        self.ports[i] = port
        (d / "redis.pid").unlink(missing_ok=True)  # a killed node's: not this start's
        log = d / "redis.log"
        logged = log.stat().st_size if log.exists() else 0
        # a child of the test, not a daemon: its exit at a taken port is seen at once
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                                 "--cluster-config-file", str(d / "nodes.conf"), "--cluster-port", str(bus),
                                 "--cluster-node-timeout", str(self.node_timeout_ms), "--appendonly", "yes",
                                 "--save", "", "--dir", str(d), "--pidfile", str(d / "redis.pid"),
                                 "--logfile", str(log)], cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs[i] = proc
        deadline = time.monotonic() + self.timeout
        while proc.poll() is None:
            with contextlib.suppress(redis.RedisError, OSError):
                # the PID: a server another program started on this port first answers too
                if self.node(i).info("server")["process_id"] == proc.pid:
                    return True
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {i} of the local Redis Cluster in {self.root} did not answer on {port}")
            time.sleep(0.05)
        if port_taken(log, logged):
            return False
        raise RuntimeError(f"node {i} of the local Redis Cluster exited with {proc.returncode}; see {log}")

    def restart(self, i: int) -> None:
        """Start node ``i`` (killed) again on its port, folder, AOF and cluster config (its bus port read from
        its nodes.conf), wait until it answers a PING, and then until the cluster is ok. Its ports are the
        ones the other nodes know it by: while one is held (a connection to the dead node not closed yet
        on this side), it is started again on them until the cluster's timeout."""
        d = self.dirs[i]
        myself = next(line for line in (d / "nodes.conf").read_text().splitlines() if "myself" in line)
        bus = int(myself.split()[1].split("@")[1].split(",")[0])
        deadline = time.monotonic() + self.timeout
        while not self._start_node(i, self.ports[i], bus):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {i} could not bind port {self.ports[i]} or {bus} again")
            time.sleep(0.2)
        self.wait_ok()

    def _replicas_linked(self) -> bool:
        """Every master has its replicas connected and every replica's link is up."""
        for i in self.running():
            info = self.node(i).info("replication")
            if info["role"] == "master" and int(info.get("connected_slaves", 0)) < self.replicas:
                return False
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def wait_ok(self) -> None:
        """Until every node that runs says ``cluster_state:ok`` and knows all masters."""
        def ok() -> bool:
            for i in self.running():
                info = self.node(i).cluster("info")
                if info.get("cluster_state") != "ok":
                    return False
            return True
        self._wait(ok)

    def running(self) -> list[int]:
        return [i for i, d in enumerate(self.dirs) if _alive(d / "redis.pid")]

    def masters(self) -> list[tuple[str, int, str]]:
        """(host, port, node id) of the masters, as the first running node sees them."""
        nodes = self.node(self.running()[0]).cluster("nodes")
        return [(addr.split(":")[0], int(addr.split(":")[1].split("@")[0]), v["node_id"])
                for addr, v in nodes.items() if "master" in v["flags"] and "fail" not in v["flags"]]

    def node_id(self, i: int) -> str:
        myid = self.node(i).execute_command("CLUSTER", "MYID")
        return myid.decode() if isinstance(myid, bytes) else str(myid)

    def move_slot(self, slot: int, dst: int, keys_first: int | None = None) -> None:
        """Migrate ``slot`` with its keys to node index ``dst`` (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE).
        ``keys_first``: move only that many keys and leave the slot half-migrated (``finish_move`` ends it)."""
        src = self.slot_owner(slot)
        s, t = self.node(src), self.node(dst)
        t.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(src))
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(dst))
        keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100_000)
        if keys_first is not None:
            keys = keys[:keys_first]
        if keys:
            s.execute_command("MIGRATE", "127.0.0.1", self.ports[dst], "", 0, 5000, "KEYS", *keys)
        if keys_first is None:
            self.finish_move(slot, src, dst)

    def finish_move(self, slot: int, src: int, dst: int) -> None:
        s = self.node(src)
        keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100_000)
        if keys:
            s.execute_command("MIGRATE", "127.0.0.1", self.ports[dst], "", 0, 5000, "KEYS", *keys)
        dst_id = self.node_id(dst)
        for i in self.running():
            with contextlib.suppress(redis.ResponseError):  # a replica refuses SETSLOT
                self.node(i).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def slot_owner(self, slot: int) -> int:
        """Index of the node serving ``slot``."""
        for start, end, master, *_ in self.node(self.running()[0]).execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return self.ports.index(int(master[1]))
        raise LookupError(slot)

    def replicas_of(self, i: int) -> list[int]:
        """Indexes of the nodes that replicate node ``i``."""
        master_id = self.node_id(i)
        nodes = self.node(i).cluster("nodes")
        return [self.ports.index(int(addr.split(":")[1].split("@")[0])) for addr, v in nodes.items()
                if v.get("master_id") == master_id and "slave" in v["flags"]]

    def pid(self, i: int) -> int:
        return int((self.dirs[i] / "redis.pid").read_text())

    def pause(self, i: int) -> None:
        os.kill(self.pid(i), signal.SIGSTOP)

    def resume(self, i: int) -> None:
        os.kill(self.pid(i), signal.SIGCONT)

    def kill(self, i: int) -> None:
        pid = int((self.dirs[i] / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        self._wait(lambda: not _pid_alive(pid))
        if i in self.procs:
            self.procs[i].wait(5)

    def stop(self) -> None:
        """SIGTERM every node by its pidfile (SIGKILL if it is still there after 5 s)."""
        for d in self.dirs:
            pidfile = d / "redis.pid"
            if not _alive(pidfile):
                continue
            with contextlib.suppress(OSError, ValueError):  # SIGTERM: the server shuts down (nothing to save)
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while _alive(pidfile) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pidfile):
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pidfile.read_text()), signal.SIGKILL)
        for proc in self.procs.values():  # reap the children (and end one that never wrote its pidfile)
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    def _wait(self, cond: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except (redis.RedisError, OSError) as exc:
                last = exc
            time.sleep(0.05)
        raise TimeoutError(f"the local Redis Cluster in {self.root} did not get ready ({last!r})")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (our own child that exited) counts as gone
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def _alive(pidfile: Path) -> bool:
    try:
        return _pid_alive(int(pidfile.read_text()))
    except (OSError, ValueError):
        return False
