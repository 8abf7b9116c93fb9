"""A cluster node connection closed by another task mid-command is a connection error, and the
cluster client retries it: redis-py closes every node's connections, in-use ones included,
when one command meets ``CLUSTERDOWN`` during a failover, and a request for a run on a healthy
master then answered 500 (``'NoneType' object has no attribute 'writelines'``)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest
from redis.asyncio.connection import SSLConnection
from redis.exceptions import ConnectionError as RedisConnectionError

from app.store import make_backend
from app.store.redis.backend import RedisBackend
from app.store.redis.cluster import cluster_client
from app.store.redis.cluster_connection import ClusterConnection, ClusterSSLConnection

STEPS = range(6)
"""Loop turns the sender waits before sending, so that it meets the close at every point."""


async def send_while_closing(conn: ClusterConnection, steps: int) -> str:
    """Send PING ``steps`` loop turns after another task starts closing ``conn``."""
    await conn.connect()

    async def send() -> str:
        for _ in range(steps):
            await asyncio.sleep(0)
        try:
            await conn.send_command("PING")
        except RedisConnectionError:
            return "connection error"
        return "sent"

    sender = asyncio.create_task(send())
    await conn.disconnect()
    return await sender


async def test_a_send_on_a_connection_another_task_closed_is_a_connection_error(
        redis_url: str) -> None:
    url = urlsplit(redis_url)
    outcomes = set()
    for steps in STEPS:
        conn = ClusterConnection(host=url.hostname or "127.0.0.1", port=url.port or 6379,
                                 socket_timeout=2.0)
        outcomes.add(await send_while_closing(conn, steps))
        await conn.disconnect()
    # Any other exception fails the test. (redis-py 8.2 checks for a closed writer itself, and
    # its close completes before these sends, which reconnect: every one may be "sent".)
    assert outcomes <= {"sent", "connection error"}


@pytest.mark.parametrize("raised", [
    AttributeError("'NoneType' object has no attribute 'writelines'"),  # the writer gone
    RuntimeError("unable to perform operation on <TCPTransport closed=True>"),  # uvloop
])
async def test_what_older_redis_py_raised_on_a_closed_writer_is_a_connection_error(
        redis_url: str, raised: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    """The errors redis-py before 8.2 let out of a send whose connection another task closed
    (the versions ``redis>=5.0`` still allows) become the connection error the cluster
    client retries."""
    url = urlsplit(redis_url)
    conn = ClusterConnection(host=url.hostname or "127.0.0.1", port=url.port or 6379,
                             socket_timeout=2.0)
    await conn.connect()

    async def closed_mid_write(command: object) -> None:
        raise raised

    monkeypatch.setattr(conn, "_send_packed_command", closed_mid_write)
    try:
        with pytest.raises(RedisConnectionError, match="closed by another task"):
            await conn.send_command("PING")
    finally:
        await conn.disconnect()


def test_a_rediss_cluster_gets_them_over_tls() -> None:
    # built, not connected: the seed nodes and the nodes found later take this class
    client = cluster_client("rediss://127.0.0.1:1,rediss://127.0.0.1:2", connect_timeout=1.0,
                            socket_timeout=1.0, max_connections=8, client_name=None)
    assert client.connection_kwargs["connection_class"] is ClusterSSLConnection
    assert all(n.connection_class is ClusterSSLConnection
               for n in client.nodes_manager.startup_nodes.values())
    node = next(iter(client.nodes_manager.startup_nodes.values()))
    conn = node.acquire_connection()  # made from the node's TLS settings (not connected)
    assert isinstance(conn, ClusterSSLConnection) and isinstance(conn, SSLConnection)


async def test_every_node_of_the_cluster_client_uses_them(cluster_url: str) -> None:
    client = cluster_client(cluster_url, connect_timeout=2.0, socket_timeout=2.0,
                            max_connections=8, client_name=None)
    try:
        for key in ("a", "b", "c", "d"):  # spread over the masters
            await client.set(key, key)
            assert await client.get(key) == key.encode()
        nodes = client.get_nodes()
        assert len(nodes) >= 3
        assert all(issubclass(n.connection_class, ClusterConnection) for n in nodes)
    finally:
        await client.aclose()


async def test_closing_the_backend_stops_its_role_checks_and_leaves_no_client(
        cluster_url: str) -> None:
    """A ROLE check still running when the backend closed used to make a new per-master
    client after the others were closed, and its connection stayed open (uvloop's close of a
    stopping server found it)."""
    backend = make_backend(cluster_url, lease=1.0, run_ttl=60, cluster=True)
    assert isinstance(backend, RedisBackend)
    await backend.start()
    nodes = backend._nodes
    assert nodes is not None
    nodes.should_wait(nodes.node_of("al:{x}:run"))  # starts a background ROLE check
    checks = set(nodes._role_checks)
    assert checks
    await backend.close()
    assert all(task.done() for task in checks)
    assert nodes._clients == {}
