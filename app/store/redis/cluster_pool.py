"""A cluster client whose callers wait for a connection instead of failing.

redis-py's cluster client gives each node a pool of ``max_connections`` that refuses the next
command at once (``MaxConnectionsError``) when all are in use; the one-node client's
``BlockingConnectionPool`` makes the caller wait up to the socket timeout. At 300 runs at once
on one API process, ~19 % of ``POST /runs`` on a cluster answered ``503`` that way, where one
node served every one.

Here each command (and each pipeline) holds one of ``max_connections`` places for as long as
it runs. A command uses one connection of one node at a time, a pipeline one per node it
touches, so no node's pool is ever asked for more than it has; a caller finding every place
taken waits up to ``wait`` seconds for one, then fails as the pool would have (a
``ConnectionError``: ``503`` with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import MaxConnectionsError

T = TypeVar("T")

_holding: contextvars.ContextVar[bool] = contextvars.ContextVar("holding", default=False)
"""Whether this task holds a place already: a pipeline resends a redirected command through
the client after its own round trip, and must not wait for a second place."""


class WaitingCluster(RedisCluster):
    """``RedisCluster`` with at most ``max_connections`` commands and pipelines under way;
    the rest wait up to ``wait`` seconds for a place."""

    def __init__(self, *args: Any, wait: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._places = asyncio.Semaphore(int(kwargs.get("max_connections", 100)))
        self._wait = wait

    async def holding(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result, awaited while holding a place (waiting for one if all are
        taken; a task that holds one already does not wait for a second)."""
        if _holding.get():
            return await work
        if self._places.locked():
            try:
                async with asyncio.timeout(self._wait):
                    await self._places.acquire()
            except TimeoutError:
                work.close()
                raise MaxConnectionsError(
                    f"every connection in use for {self._wait} s") from None
        else:
            await self._places.acquire()  # free: returns without suspending
        token = _holding.set(True)
        try:
            return await work
        finally:
            _holding.reset(token)
            self._places.release()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        return await self.holding(super().execute_command(*args, **kwargs))

    def pipeline(self, transaction: Any | None = None,
                 shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:  # what redis-py answers, kept
            return super().pipeline(transaction, shard_hint)
        return WaitingPipeline(self, transaction)  # type: ignore[abstract]  # as redis-py builds it


class WaitingPipeline(ClusterPipeline):
    """A pipeline of :class:`WaitingCluster` holds one place while it executes."""

    async def execute(self, raise_on_error: bool = True,
                      allow_redirections: bool = True) -> list[Any]:
        client = self.cluster_client
        assert isinstance(client, WaitingCluster)
        return await client.holding(super().execute(raise_on_error, allow_redirections))
