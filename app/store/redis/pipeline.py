"""Script calls made in the same event-loop tick go to Redis as one pipeline.

Many runs write their event batches, take queue messages and heartbeat at once; one round trip
per call made the client's per-command cost (~90 µs of CPU in redis-py) the largest share of a
run's CPU. ``ScriptPipeline.call`` queues the call and returns its own result or error, exactly
as a direct call would; the flush sends every call queued in that tick with one write and one
read. Timeline::

    run A ─ call(APPEND) ─┐
    run B ─ call(TAKE) ───┼─ next tick: EVALSHA A, EVALSHA B, EVALSHA C ─▶ results to A, B, C
    run C ─ call(APPEND) ─┘

Calls are sent by SHA without a SCRIPT EXISTS check first; a ``NOSCRIPT`` answer (Redis
restarted and forgot its scripts) re-runs that call through the script object, which loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

Call = tuple[AsyncScript, list[Any], list[Any], "asyncio.Future[Any]"]


async def settle(future: asyncio.Future[Any], work: Awaitable[Any]) -> None:
    """``future`` gets ``work``'s result or error, unless a caller settled it meanwhile."""
    try:
        result = await work
    except Exception as exc:
        if not future.done():
            future.set_exception(exc)
        return
    if not future.done():
        future.set_result(result)


class ScriptCalls(Protocol):
    """What the backend runs its scripts through: ``ScriptPipeline``, ``redis_lean_scripts.
    LeanScripts`` or ``redis_cluster.ClusterScripts``."""

    async def call(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        """``script``'s result (or its error) for ``keys``/``args``."""

    async def close(self) -> None:
        """Wait for (or fail) the calls under way."""


class ScriptPipeline:
    """See the module docstring. ``most``: calls sent in one pipeline at the most;
    ``flights``: pipelines out at once at the most. Calls made while that many are out wait for
    one to come back and go together in the next: a burst becomes fewer, larger round trips
    instead of one connection per loop turn (which emptied the pool, and the pool's refusal
    failed the calls)."""

    def __init__(self, client: Redis, *, most: int = 256, flights: int = 8) -> None:
        self._client = client
        self._most = most
        self._flights = flights
        self._pending: list[Call] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        """Run ``script`` with ``keys``/``args`` in the next pipeline; its result or error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((script, keys, args, future))
        if not self._scheduled and len(self._tasks) < self._flights:
            self._scheduled = True
            loop.call_soon(self._flush_soon)
        return await future

    def _flush_soon(self) -> None:
        self._scheduled = False
        while self._pending and len(self._tasks) < self._flights:
            batch, self._pending = self._pending[:self._most], self._pending[self._most:]
            task = asyncio.create_task(self._flush(batch))
            self._tasks.add(task)  # keep a reference until done (no orphan tasks)
            task.add_done_callback(self._landed)

    def _landed(self, task: asyncio.Task[None]) -> None:
        """A pipeline came back: the calls that waited for room go out."""
        self._tasks.discard(task)
        if self._pending and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_soon)

    async def _flush(self, calls: list[Call], *, load: bool = True) -> None:
        """Send ``calls`` as one pipeline; each future gets its result. A ``NOSCRIPT`` answer
        goes to ``_direct`` (which loads the script) unless ``load`` is false: then it is the
        call's error."""
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for script, keys, args, _ in calls:
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                self._after(pipe)
                results = await self._settle(await pipe.execute(raise_on_error=False),
                                             len(calls))
        except BaseException as exc:  # the connection failed: every call fails alike
            for *_, future in calls:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception)
                                         else ResponseError("pipeline cancelled"))
            if not isinstance(exc, Exception):
                raise
            return
        for (script, keys, args, future), result in zip(calls, results, strict=True):
            if future.done():
                continue
            if load and (isinstance(result, NoScriptError) or (
                    isinstance(result, ResponseError) and "NOSCRIPT" in str(result))):
                await self._direct(script, keys, args, future)
            elif isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

    def _after(self, pipe: Any) -> None:
        """Commands sent after the calls on the same connection (none here)."""

    async def _settle(self, results: list[Any], calls: int) -> list[Any]:
        """The ``calls`` results from the pipeline's (may raise: every call fails alike)."""
        return results

    async def _direct(self, script: AsyncScript, keys: list[Any], args: list[Any],
                      future: asyncio.Future[Any]) -> None:
        await settle(future, script(keys=keys, args=args))

    async def close(self) -> None:
        """Wait for flushes under way and the calls waiting for room."""
        while self._tasks or self._pending:
            if not self._tasks:
                self._flush_soon()
            await asyncio.gather(*self._tasks, return_exceptions=True)
