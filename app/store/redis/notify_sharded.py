"""Run notes on Redis Cluster: each run's notes on its own shard channel ``al:{run}:notes``.

Same notes, waiters and batches as ``redis_notify.Notifier``; only the subscription differs.
Instead of one global channel that every process receives (and that Redis Cluster would
broadcast to every node), a process subscribes (``SSUBSCRIBE``, through ``ShardFeeds``) to the
runs it follows: an API process to the runs its clients tail, a worker to the runs it drives
(cancel). ``follow`` returns once the subscription is confirmed, so the caller's next look at
the log cannot miss a note. A run nobody here waits on any more is unsubscribed by the sweep
(``WATCH_TTL`` after its last tail read). When a master fails over, its runs' waiters are
woken to re-read the log and their cancel watchers re-check the flag, as after a reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from app.store.redis.cluster import NodeClients
from app.store.redis.keys import notes_channel
from app.store.redis.notify import WATCH_TTL, Notifier
from app.store.redis.shards import ShardFeeds


class ShardedNotifier(Notifier):
    """See the module docstring."""

    def __init__(self, nodes: NodeClients, recheck: Callable[[str], Awaitable[bool]]) -> None:
        super().__init__(None, recheck)
        self._feeds = ShardFeeds(nodes, self._note, self._lost)
        self._followed: dict[str, str] = {}
        """channel → run_id of every run subscribed here."""

    async def ensure_started(self) -> None:
        """Start the sweep (subscriptions are made per run by ``follow``)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._sweeper(), name="redis-notify-sweep")

    async def follow(self, run_id: str) -> None:
        """Subscribe to the run's notes (once) and wait until Redis confirmed it."""
        await self.ensure_started()
        channel = notes_channel(run_id)
        self._followed[channel] = run_id
        self._watched[run_id] = asyncio.get_running_loop().time()  # kept WATCH_TTL from now
        await self._feeds.add(channel)

    def watch(self, run_id: str) -> int | None:
        """See ``Notifier.watch``; unknown while the run's subscription is not live (notes
        sent meanwhile are missed, so the caller must read the log)."""
        last = super().watch(run_id)
        return last if self._feeds.live(notes_channel(run_id)) else None

    async def _lost(self, channels: list[str]) -> None:
        for channel in channels:
            run_id = self._followed.get(channel)
            if run_id is None:
                continue
            self._last.pop(run_id, None)  # notes may have been missed: re-read the log
            self._batch.pop(run_id, None)
            self.feeds.resync(run_id)
            event = self._events.pop(run_id, None)
            if event is not None:
                event.set()
            cancel = self._cancels.get(run_id)
            with contextlib.suppress(Exception):  # the store failing: the flag waits
                if cancel is not None and await self._recheck(run_id):
                    cancel.set()

    async def _sweeper(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(WATCH_TTL / 4)
            self._sweep(loop.time())
            for channel, run_id in list(self._followed.items()):
                if run_id not in self._watched and run_id not in self._cancels:
                    del self._followed[channel]
                    await self._feeds.remove(channel)

    async def close(self) -> None:
        """Stop the sweep and close every subscription."""
        await super().close()
        with contextlib.suppress(Exception):
            await self._feeds.close()
