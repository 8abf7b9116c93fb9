"""One pub/sub listener per process: wakes event tails and cancel watchers.

Writers publish ``e:<run>`` on ``al:notify`` after each appended batch and ``c:<run>`` on
cancel. Subscribers never hold a Redis connection of their own: they wait on an
``asyncio.Event`` here and then read the log with XRANGE, so a slow subscriber slows nobody.

Timeline (one SSE tail)::

    wait_events ─ XRANGE (empty) ─ register waiter ─ XRANGE again ─ await ─┐
    worker ─ append script: XADD … PUBLISH e:run ─▶ listener ─ wake ───────┘─ XRANGE ─▶ events

After a reconnect (Redis restarted) every event waiter is woken to re-read, and every cancel
watcher re-checks the run's ``cancel`` flag through ``recheck``: notes sent while the
connection was down are lost, flags are not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.backends.redis_keys import NOTIFY_CHANNEL

log = logging.getLogger(__name__)


class Notifier:
    """The listener task and the waiters it wakes (created lazily on first use)."""

    def __init__(self, client: Redis, recheck: Callable[[str], Awaitable[bool]]) -> None:
        self._client = client
        self._recheck = recheck
        self._events: dict[str, asyncio.Event] = {}
        self._cancels: dict[str, asyncio.Event] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def ensure_started(self) -> None:
        """Start the listener and wait (briefly) until it is subscribed."""
        if self._task is None or self._task.done():
            self._ready = asyncio.Event()
            self._task = asyncio.create_task(self._listen(), name="redis-notify")
        try:
            async with asyncio.timeout(1.0):
                await self._ready.wait()
        except TimeoutError:
            pass  # Redis down: waiters fall back to their timeouts and flags

    def events_waiter(self, run_id: str) -> asyncio.Event:
        """The event set when ``run_id`` gets new events (shared by its subscribers)."""
        event = self._events.get(run_id)
        if event is None:
            event = self._events[run_id] = asyncio.Event()
        return event

    def cancel_waiter(self, run_id: str) -> asyncio.Event:
        """The event set when cancel is asked for ``run_id``."""
        event = self._cancels.get(run_id)
        if event is None:
            event = self._cancels[run_id] = asyncio.Event()
        return event

    def forget_cancel(self, run_id: str) -> None:
        """The run's cancel watcher is gone."""
        self._cancels.pop(run_id, None)

    async def close(self) -> None:
        """Stop the listener."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _listen(self) -> None:
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(NOTIFY_CHANNEL)
                self._ready.set()
                await self._after_reconnect()
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._dispatch(message)
            except (RedisError, OSError) as exc:
                log.warning("notify listener lost Redis (%s); reconnecting", exc)
                await asyncio.sleep(0.2)
            finally:
                await _quiet_close(pubsub)

    def _dispatch(self, message: dict[str, Any]) -> None:
        data = message.get("data")
        if not isinstance(data, bytes):
            return
        kind, _, run_id = data.decode().partition(":")
        table = self._events if kind == "e" else self._cancels
        event = table.pop(run_id, None) if kind == "e" else table.get(run_id)
        if event is not None:
            event.set()

    async def _after_reconnect(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()
        for run_id, event in list(self._cancels.items()):
            if await self._recheck(run_id):
                event.set()


async def _quiet_close(pubsub: Any) -> None:
    with contextlib.suppress(RedisError, OSError):
        await pubsub.aclose()
