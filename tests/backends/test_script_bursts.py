"""A burst of script calls, each made in its own loop turn, gets every result: the pipeline
keeps a bounded number of round trips out and sends what waits in the next, and on a Redis
Cluster a node's pool that is all in use makes the caller wait instead of failing it.

Under the production benchmark's load (50 runs at once on a 3-master cluster) 1–2 % of
``POST /runs`` answered ``503 backend_unavailable`` ("Too many connections"): every loop turn
with a call started its own pipeline, each holding a connection of the node's pool through its
``WAIT``, and the pool of 32 refused the 33rd at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from app.store.redis.cluster import ClusterScripts, NodeClients, cluster_client
from app.store.redis.pipeline import ScriptPipeline

ECHO = "return ARGV[1]"
CALLS = 120


async def staggered(call: Any, count: int) -> list[Any]:
    """``count`` calls, each started in its own loop turn (as runs' writes come)."""
    tasks = []
    for n in range(count):
        tasks.append(asyncio.create_task(call(n)))
        await asyncio.sleep(0)
    return await asyncio.gather(*tasks)


class SlowFlights:
    """Wraps a client's ``pipeline`` so each round trip takes a little longer and the most
    under way at once is recorded."""

    def __init__(self, client: Redis) -> None:
        self.real = client.pipeline
        self.out = 0
        self.most_out = 0
        self.sent = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self.real(*args, **kwargs)
        execute = pipe.execute

        async def slow_execute(*a: Any, **kw: Any) -> Any:
            self.out += 1
            self.sent += 1
            self.most_out = max(self.most_out, self.out)
            try:
                await asyncio.sleep(0.005)
                return await execute(*a, **kw)
            finally:
                self.out -= 1

        pipe.execute = slow_execute
        return pipe


async def test_a_burst_keeps_at_most_flights_round_trips_out(redis_client: Redis) -> None:
    script = redis_client.register_script(ECHO)
    pipeline = ScriptPipeline(redis_client, flights=3)
    flights = SlowFlights(redis_client)
    redis_client.pipeline = flights  # type: ignore[method-assign]

    async def call(n: int) -> Any:
        return await pipeline.call(script, ["k"], [str(n)])

    results = await asyncio.wait_for(staggered(call, CALLS), 30)
    assert results == [str(n).encode() for n in range(CALLS)]
    assert flights.most_out <= 3
    assert flights.sent < CALLS / 2  # the calls that waited went out together
    await pipeline.close()
    assert flights.out == 0


async def test_close_sends_the_calls_still_waiting_for_room(redis_client: Redis) -> None:
    script = redis_client.register_script(ECHO)
    pipeline = ScriptPipeline(redis_client, flights=1)
    redis_client.pipeline = SlowFlights(redis_client)  # type: ignore[method-assign]
    first = asyncio.create_task(pipeline.call(script, ["k"], ["a"]))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the first is out
    waiting = asyncio.create_task(pipeline.call(script, ["k"], ["b"]))
    await asyncio.sleep(0)
    await asyncio.wait_for(pipeline.close(), 10)
    assert waiting.done() and first.done()
    assert (first.result(), waiting.result()) == (b"a", b"b")


async def small_cluster(url: str, most: int, wait: float = 5.0) -> RedisCluster:
    client = cluster_client(url, connect_timeout=1.0, socket_timeout=wait,
                            max_connections=most, client_name=None)
    await client.initialize()
    return client


@pytest.fixture
async def cluster(cluster_url: str) -> AsyncIterator[RedisCluster]:
    client = await small_cluster(cluster_url, 64)
    yield client
    await client.aclose()


@pytest.fixture
async def nodes(cluster: RedisCluster) -> AsyncIterator[NodeClients]:
    nodes = NodeClients(cluster, max_connections=2, timeout=5.0)
    yield nodes
    await nodes.close()


async def call_all(scripts: ClusterScripts, script: Any, count: int) -> list[Any]:
    async def call(n: int) -> Any:
        return await scripts.call(script, ["{burst}k"], [str(n)])

    try:
        return await asyncio.wait_for(staggered(call, count), 30)
    finally:
        await scripts.close()


@pytest.mark.parametrize("flights", [1, 8])
async def test_a_burst_on_a_cluster_node_with_a_small_pool_gets_every_result(
        cluster: RedisCluster, nodes: NodeClients, flights: int) -> None:
    script = cluster.register_script(ECHO)
    # more flights than connections: the pool makes the extra flushes wait for one
    results = await call_all(ClusterScripts(nodes, flights=flights), script, CALLS)
    assert results == [str(n).encode() for n in range(CALLS)]
    pool = nodes.client(nodes.node_of("{burst}k")).connection_pool
    assert len(pool._in_use_connections) == 0  # type: ignore[attr-defined]
    assert len(pool._available_connections) <= 2  # type: ignore[attr-defined]
    # durable writes share the pool with the script flushes, and wait for it too
    done = await asyncio.wait_for(asyncio.gather(*(
        nodes.durable("{burst}k", lambda pipe, n=n: pipe.set(f"{{burst}}d{n}", n))
        for n in range(20))), 30)
    assert [r[0] for r in done] == [True] * 20


async def test_noscript_on_every_flight_at_once_does_not_wait_for_itself(
        cluster: RedisCluster, nodes: NodeClients) -> None:
    """A promoted replica that never saw the scripts answers ``NOSCRIPT`` to every flight; each
    loads the script and sends its call again within its own flight."""
    script = cluster.register_script(ECHO)
    await nodes.client(nodes.node_of("{burst}k")).script_flush()
    results = await call_all(ClusterScripts(nodes, flights=2), script, 40)
    assert results == [str(n).encode() for n in range(40)]


async def test_more_commands_than_a_nodes_connections_wait_for_one(cluster_url: str) -> None:
    """redis-py's cluster pools refuse the command past ``max_connections`` at once: at 300
    runs at once ~19 % of ``POST /runs`` failed so. Here they wait for a connection."""
    client = await small_cluster(cluster_url, 3)
    try:
        async def one(n: int) -> Any:
            await client.set(f"{{w}}k{n}", n)
            async with client.pipeline(transaction=False) as pipe:
                pipe.get(f"{{w}}k{n}")
                pipe.incr("{w}count")
                return (await pipe.execute())[0]

        got = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(150))), 30)
        assert got == [str(n).encode() for n in range(150)]
        assert int(await client.get("{w}count")) == 150
        for node in client.get_nodes():
            assert len(node._connections) <= 3
    finally:
        await client.aclose()


async def test_a_command_that_finds_no_connection_in_time_is_a_connection_error(
        cluster_url: str) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    client = await small_cluster(cluster_url, 1, wait=0.3)
    try:
        held = asyncio.create_task(client.blpop(["{w}never"], timeout=3))
        await asyncio.sleep(0.1)  # the only place is held by the blocking pop
        started = asyncio.get_running_loop().time()
        with pytest.raises(RedisConnectionError):
            await client.get("{w}k")
        assert asyncio.get_running_loop().time() - started < 2.5
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await held
    finally:
        await client.aclose()


async def test_the_services_pools_are_sized_by_the_setting(redis_url: str,
                                                           cluster_url: str) -> None:
    """``AGENTLOOP_REDIS_MAX_CONNECTIONS`` sizes the one-node pool, the cluster client's places
    and its per-master script pools."""
    from app.config import Settings
    from app.process.setup import make_store
    from app.store.redis.cluster_pool import WaitingCluster

    one = make_store(Settings(redis_url=redis_url, redis_max_connections=7))
    assert one.client.connection_pool.max_connections == 7  # type: ignore[attr-defined]
    await one.close()
    many = make_store(Settings(redis_url=cluster_url, redis_cluster=True,
                               redis_max_connections=5))
    client = many.client  # type: ignore[attr-defined]
    assert isinstance(client, WaitingCluster) and client._places._value == 5
    await client.initialize()
    nodes = many._nodes  # type: ignore[attr-defined]
    assert nodes.client(nodes.node_of("{x}k")).connection_pool.max_connections == 5
    await many.close()
    assert Settings().redis_max_connections == 256
