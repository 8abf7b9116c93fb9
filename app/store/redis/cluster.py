"""Redis Cluster connections (``AGENTLOOP_REDIS_CLUSTER=true``): the cluster client, the
per-master clients, and where the backend's keys live.

Placement: every per-run key carries the hash tag ``{run_id}``, so each Lua script and each
per-run pipeline touches one slot; a run's notes go to its own shard channel
``al:{run}:notes`` (``SPUBLISH`` from the script, on the master that owns the run). The global
keys are separate commands, never inside a script: ``al:jobs`` (the dispatch stream and its
consumer group) is one key, hence one master — deliberately, so that dispatch stays one FIFO
with one pending list that ``XAUTOCLAIM`` can scan; it takes ~4 cheap commands per run.
``al:tenant:<t>:runs`` and ``al:idem:<t>:<key>`` spread over the slots by tenant and key.

Durability: Redis replicates asynchronously, so a master can acknowledge a write and die
before any replica has it. Writes that others act on (scripts: events, claims, queue
takes, steers and follow-ups, cancel; a new run and its job) are followed by ``WAIT 1`` on the
same connection. When no replica confirms in time, the call fails with ``ReplicaLag`` (a
``BackendError``, retried by the caller; the event writes are idempotent by token) unless the
master has no replica attached at all — then there is nothing that could be promoted over it
and the write stands, and until a replica attaches (checked every ``ROLE_TTL`` s) writes to
that master are not followed by ``WAIT``. See docs/cluster.md for what an acknowledged write
can still lose.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.store.redis.cluster_connection import use_cluster_connections
from app.store.redis.cluster_pool import WaitingCluster
from app.store.redis.pipeline import ScriptPipeline

WAIT_MS = 500
"""How long a write waits for one replica's acknowledgement (``WAIT 1 500``)."""
ROLE_TTL = 1.0
"""Seconds a master's replica count (``ROLE``) is trusted."""


class ReplicaLag(RedisError):
    """No replica confirmed a write in time although the master has replicas."""


def seed_nodes(url: str) -> tuple[list[ClusterNode], dict[str, Any]]:
    """``redis://[user:pass@]h1:p1,redis://h2:p2`` (or ``…@h1:p1,h2:p2``): the seed nodes and
    the options of the first URL (credentials, TLS) that apply to every node."""
    parts = [p.strip() for p in url.split(",") if p.strip()]
    first = urlsplit(parts[0] if "://" in parts[0] else f"redis://{parts[0]}")
    options: dict[str, Any] = {"ssl": first.scheme == "rediss"}
    if first.username:
        options["username"] = unquote(first.username)
    if first.password:
        options["password"] = unquote(first.password)
    nodes = []
    for part in parts:
        split = urlsplit(part if "://" in part else f"redis://{part}")
        nodes.append(ClusterNode(split.hostname or "127.0.0.1", split.port or 6379))
    return nodes, options


def cluster_client(url: str, *, connect_timeout: float, socket_timeout: float,
                   max_connections: int, client_name: str | None) -> RedisCluster:
    """The cluster client: slot map from the seeds, retried once on connection errors
    (including a connection another task closed mid-command: see redis_cluster_connection)."""
    nodes, options = seed_nodes(url)
    client = WaitingCluster(
        wait=socket_timeout,
        startup_nodes=nodes, max_connections=max_connections, require_full_coverage=False,
        socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout,
        retry=Retry(ExponentialBackoff(cap=0.1, base=0.02), 1),
        retry_on_error=[RedisConnectionError, RedisTimeoutError], client_name=client_name,
        **options)
    use_cluster_connections(client)
    return client


class NodeClients:
    """A plain client per master node (its own pool), for commands that must share a
    connection with the write they follow (``WAIT``) and for shard subscriptions. A caller
    finding every connection of a node's pool in use waits up to ``timeout`` seconds for one,
    as on one node (a pool that refused at once failed a burst's calls with 503)."""

    def __init__(self, cluster: RedisCluster, max_connections: int = 32,
                 timeout: float = 5.0) -> None:
        self.cluster = cluster
        self._most = max_connections
        self._timeout = timeout
        self._clients: dict[str, Redis] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._replicas: dict[str, tuple[int, float]] = {}
        """node name → (replicas attached, when seen)."""
        self._role_checks: set[asyncio.Task[None]] = set()

    def node_of(self, key: str) -> ClusterNode:
        """The master that serves ``key``'s slot (as last known)."""
        node = self.cluster.get_node_from_key(key)
        if node is None:
            raise RedisConnectionError(f"no master for {key}")
        return node

    def client(self, node: ClusterNode) -> Redis:
        """The plain client of ``node`` (created on first use)."""
        client = self._clients.get(node.name)
        if client is None:
            kwargs = {k: v for k, v in node.connection_kwargs.items()
                      if k not in ("host", "port")}
            pool = BlockingConnectionPool(connection_class=node.connection_class,
                                          host=node.host, port=node.port,
                                          max_connections=self._most, timeout=self._timeout,
                                          **kwargs)
            client = self._clients[node.name] = Redis(connection_pool=pool)
        return client

    async def refresh(self) -> None:
        """Re-read the slot map (after a failover); concurrent callers share one refresh."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self.cluster.nodes_manager.initialize())
        await asyncio.shield(self._refresh)

    def should_wait(self, node: ClusterNode) -> bool:
        """Whether writes to ``node`` are followed by ``WAIT`` (it has replicas, or unknown).
        A count older than ``ROLE_TTL`` is re-read in the background."""
        count, seen = self._replicas.get(node.name, (1, 0.0))
        if asyncio.get_running_loop().time() - seen > ROLE_TTL and not self._role_checks:
            task = asyncio.create_task(self._check_role(node))
            self._role_checks.add(task)
            task.add_done_callback(self._role_checks.discard)
        return count > 0

    async def _check_role(self, node: ClusterNode) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self.replicas(node)

    async def replicas(self, node: ClusterNode) -> int:
        """How many replicas are attached to ``node`` now (``ROLE``)."""
        role: Any = await self.client(node).execute_command("ROLE")  # type: ignore[no-untyped-call]
        count = len(role[2]) if role and role[0] == b"master" else 0
        self._replicas[node.name] = (count, asyncio.get_running_loop().time())
        return count

    async def any_master_answers(self) -> bool:
        """Whether a master of the slot map answers ``PING`` (the map is read on first use)."""
        if not self.cluster.get_primaries():
            await self.cluster.initialize()
        answers = await asyncio.gather(*(self.client(node).ping()
                                         for node in self.cluster.get_primaries()),
                                       return_exceptions=True)
        return any(answer is True for answer in answers)

    async def confirm(self, node: ClusterNode, acked: int) -> None:
        """Raise ``ReplicaLag`` if ``acked`` is 0 and ``node`` has replicas attached."""
        if acked < 1 and await self.replicas(node):
            raise ReplicaLag(f"no replica of {node.name} confirmed the write in {WAIT_MS} ms")

    async def close(self) -> None:
        """Stop the background refresh and role checks, then close every client: a check
        still running after the clients were closed made a new client whose connection was
        never closed (uvloop's close found it open)."""
        tasks = [t for t in (self._refresh, *self._role_checks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        while self._clients:
            _, client = self._clients.popitem()
            await client.aclose(close_connection_pool=True)

    async def durable(self, key: str, fill: Callable[[Any], None]) -> list[Any]:
        """Run the commands ``fill`` queues on a pipeline to ``key``'s master, then ``WAIT``
        for a replica on the same connection; their results (``ReplicaLag`` if unconfirmed)."""
        node = self.node_of(key)
        wait = self.should_wait(node)
        try:
            async with self.client(node).pipeline(transaction=False) as pipe:
                fill(pipe)
                if wait:
                    pipe.execute_command("WAIT", 1, WAIT_MS)
                results = await pipe.execute()
                acked = results.pop() if wait else 1
        except (RedisConnectionError, RedisTimeoutError, OSError):
            await self.refresh_quietly()
            raise
        except ResponseError as exc:
            if _moved(exc):
                await self.refresh_quietly()
            raise
        await self.confirm(node, int(acked))
        return results

    async def refresh_quietly(self) -> None:
        """``refresh``, ignoring failures (the caller's own error is what it reports)."""
        with contextlib.suppress(RedisError, RedisClusterException, OSError):
            await self.refresh()


def _moved(exc: Exception) -> bool:
    """Whether Redis refused the command for slot ownership (it did not run)."""
    return str(exc).split(" ", 1)[0] in ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN")


class DurablePipeline(ScriptPipeline):
    """``ScriptPipeline`` to one master, each flush followed by ``WAIT 1`` (see the module
    docstring); ``NOSCRIPT`` (a promoted replica that never saw ``SCRIPT LOAD``) loads the
    script on that master and sends the call again."""

    def __init__(self, nodes: NodeClients, node: ClusterNode, *, flights: int = 8) -> None:
        super().__init__(nodes.client(node), flights=flights)
        self._nodes = nodes
        self._node = node

    def _after(self, pipe: Any) -> None:
        if self._nodes.should_wait(self._node):
            pipe.execute_command("WAIT", 1, WAIT_MS)

    async def _settle(self, results: list[Any], calls: int) -> list[Any]:
        if len(results) == calls:  # sent without WAIT
            return results
        *results, acked = results
        if isinstance(acked, Exception):
            raise acked
        await self._nodes.confirm(self._node, int(acked))
        return results

    async def _direct(self, script: AsyncScript, keys: list[Any], args: list[Any],
                      future: asyncio.Future[Any]) -> None:
        """Load the script, then send the call again with its own ``WAIT``, in this flush
        (through ``call`` it would wait for room held by this very flush: with every flight
        meeting ``NOSCRIPT`` after a failover, none would come back)."""
        try:
            await self._client.script_load(script.script)
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
            return
        await self._flush([(script, keys, args, future)], load=False)


class ClusterScripts:
    """``ScriptPipeline.call`` on the cluster: each call joins its slot master's
    ``DurablePipeline``. A call refused for slot ownership (it did not run) is sent once more
    after the slot map is re-read; a connection failure re-reads the map and propagates (the
    caller retries, the map now names the promoted replica)."""

    def __init__(self, nodes: NodeClients, *, flights: int = 8) -> None:
        self._nodes = nodes
        self._flights = flights
        self._pipes: dict[str, DurablePipeline] = {}

    async def call(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        for attempt in (1, 2):
            node = self._nodes.node_of(keys[0])
            pipe = self._pipes.get(node.name)
            if pipe is None:
                pipe = self._pipes[node.name] = DurablePipeline(self._nodes, node,
                                                                flights=self._flights)
            try:
                return await pipe.call(script, keys, args)
            except ResponseError as exc:
                if attempt == 2 or not _moved(exc):
                    raise
            except (RedisConnectionError, RedisTimeoutError, OSError):
                await self._nodes.refresh_quietly()
                raise
            await self._nodes.refresh_quietly()
        raise AssertionError("unreachable")

    async def close(self) -> None:
        for pipe in self._pipes.values():
            await pipe.close()
