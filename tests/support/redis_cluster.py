"""A throw-away Redis Cluster for tests: 3 masters and 3 replicas of ``redis-server`` on
loopback ports, formed with ``redis-cli --cluster create … --cluster-replicas 1``.

``cluster-node-timeout`` is 1 s (production: 5–15 s) so a killed master's replica is promoted
within a few seconds. The session fixture starts one cluster (``redis_cluster_url``, the URL of
every node as seeds); ``cluster_url`` flushes every master for the test. ``RedisCluster`` is
used directly by failover tests, which kill a master and wait for its replica to take over.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

NODE_TIMEOUT_MS = 1000


def cluster_ports(count: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """Free loopback ports whose cluster bus ports (port + 10000) are free too, both below
    Linux's ephemeral range (32768 up), so no client socket is given one meanwhile."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 22768)
        if port not in ports and port not in avoid and _free(port) and _free(port + 10000):
            ports.append(port)
    return ports


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class RedisCluster:
    """Six ``redis-server --cluster-enabled yes`` processes joined into one cluster."""

    def __init__(self, nodes: int = 6) -> None:
        self.ports = cluster_ports(nodes)
        self.dir = Path(tempfile.mkdtemp(prefix="agentloop-cluster-"))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """Every node as a seed, comma-separated (``AGENTLOOP_REDIS_URL`` accepts this)."""
        return ",".join(f"redis://127.0.0.1:{port}" for port in self.ports)

    def start(self) -> None:
        for port in self.ports:
            self._spawn(port)
        for i, port in enumerate(self.ports):
            for _ in range(5):
                if self._answers(port):
                    break
                # the port was taken between the check and the bind (another process on a
                # shared machine): this node gets other ports
                self.procs.pop(port).kill()
                port = self.ports[i] = cluster_ports(1, avoid=tuple(self.ports))[0]
                self._spawn(port)
            else:
                raise RuntimeError(f"cluster node {i} never came up")
        subprocess.run(["redis-cli", "--cluster", "create",
                        *(f"127.0.0.1:{p}" for p in self.ports),
                        "--cluster-replicas", "1", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=60)
        self.wait_healthy()

    def _answers(self, port: int, timeout: float = 30.0) -> bool:
        """Whether the node on ``port`` answers PING (False once its process has exited:
        it could not bind)."""
        deadline = time.monotonic() + timeout
        with _client(port) as c:
            while time.monotonic() < deadline:
                try:
                    c.ping()
                    return True
                except redis.ConnectionError:
                    if self.procs[port].poll() is not None:
                        return False
                    time.sleep(0.02)
        return False

    def _spawn(self, port: int) -> None:
        node_dir = self.dir / str(port)
        node_dir.mkdir(exist_ok=True)
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(node_dir), "--cluster-enabled", "yes",
             "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
             "--cluster-replica-validity-factor", "0", "--cluster-require-full-coverage", "no",
             "--repl-diskless-sync", "yes",
             "--repl-diskless-sync-delay", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def masters(self) -> list[int]:
        """Ports of the nodes that are masters now (as the live nodes see it)."""
        out: list[int] = []
        for port in self.live_ports():
            with _client(port) as c, contextlib.suppress(redis.RedisError):
                if c.execute_command("ROLE")[0] == b"master":
                    out.append(port)
        return out

    def live_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every live node reports ``cluster_state:ok``, every slot has a master and
        every master its replica online (a restarted node has finished its sync)."""
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if time.monotonic() > deadline:
                raise TimeoutError("the cluster did not become healthy")
            time.sleep(0.05)

    def _healthy(self) -> bool:
        for port in self.live_ports():
            with _client(port) as c:
                try:
                    info = c.execute_command("CLUSTER", "INFO").decode()
                except redis.RedisError:
                    return False
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
                if not _replication_settled(c):
                    return False
        return True

    def flush(self) -> None:
        for port in self.masters():
            with _client(port) as c:
                c.flushall()

    def kill(self, port: int) -> None:
        """SIGKILL one node (its replica, if it was a master, takes over)."""
        proc = self.procs[port]
        proc.kill()
        proc.wait()

    def restart(self, port: int) -> None:
        """Start a killed node again (it rejoins, as a replica if it was failed over)."""
        self._spawn(port)
        _wait_ping(port)

    def cleanup(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _replication_settled(c: redis.Redis) -> bool:
    """A replica's link is up; a master has its replica online (a replica still syncing
    could be promoted without the data a test is about to write) and acknowledging: a write
    to one of its slots is confirmed by every replica within 2 s. (Both links can read as
    settled while the replica's first acknowledgement after a resync is still seconds away;
    the backend's ``WAIT 1 500`` then failed a test's first writes with ``ReplicaLag``.)"""
    role = c.execute_command("ROLE")
    if role[0] == b"slave":
        return bool(role[3] == b"connected")
    if not role[2]:
        return False
    key = _key_served_by(c)
    if key is None:
        return True  # no slots: nothing to write
    c.set(key, b"1")
    c.delete(key)
    return int(c.execute_command("WAIT", len(role[2]), 2000)) >= len(role[2])


def _key_served_by(c: redis.Redis) -> bytes | None:
    """A key in a slot the master ``c`` serves (None when it serves none)."""
    port = c.connection_pool.connection_kwargs["port"]
    ranges = [(int(r[0]), int(r[1])) for r in c.execute_command("CLUSTER", "SLOTS")
              if int(r[2][1]) == port]
    if not ranges:
        return None
    for n in range(100_000):
        key = b"agentloop-test:probe:%d" % n
        slot = key_slot(key)
        if any(lo <= slot <= hi for lo, hi in ranges):
            return key
    return None


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2)


def _wait_ping(port: int) -> None:
    deadline = time.monotonic() + 10
    with _client(port) as c:
        while True:
            try:
                c.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


def is_cluster(url: str) -> bool:
    """Whether a test's store URL is this cluster's seed list (several comma-separated URLs)."""
    return "," in url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """The session's cluster (started on first use)."""
    cluster = RedisCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture
def cluster_url(redis_cluster: RedisCluster) -> str:
    """The session's cluster, healthy and flushed for this test."""
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    return redis_cluster.url
