"""Shard channel subscriptions on Redis Cluster: one ``SSUBSCRIBE`` connection per master.

A channel is subscribed on the master that owns its slot (a run's ``al:{run}:notes`` lives
with the run's keys), so a note travels from the writing script to the processes that follow
that run and nowhere else: nothing is broadcast over the cluster bus. ``add`` returns once
Redis confirmed the subscription, so a caller that then reads the log cannot miss a note.

When a master's connection breaks (it died) or Redis drops a channel itself (its slot moved:
an unsolicited ``sunsubscribe``), its channels are lost: the slot map is re-read until a
master serves them again, they are subscribed there, and ``on_lost`` is told which channels
were down (notes sent meanwhile are gone; the caller re-reads what they would have said)::

    master A dies ─ feed A read fails ─ channels of A lost ─ re-read slot map ─┐
        ┌─ (no master yet: retry every 0.2 s) ◀──────────────────────────────────┘
        └─ replica A' promoted ─ SSUBSCRIBE on A' confirmed ─ on_lost(channels)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import RedisClusterException, RedisError

from app.store.redis.cluster import NodeClients

log = logging.getLogger(__name__)
CONFIRM_TIMEOUT = 2.0


class _Feed:
    """One master's subscription connection and its reader task."""

    def __init__(self, node: ClusterNode, on_message: Callable[[bytes], None],
                 on_dropped: Callable[[_Feed, list[str]], None]) -> None:
        kwargs = {**node.connection_kwargs, "socket_timeout": None}
        self.node = node
        self.conn: AbstractConnection = node.connection_class(**kwargs)
        self.channels: set[str] = set()
        self._confirm: dict[str, asyncio.Future[None]] = {}
        self._leaving: set[str] = set()
        self._on_message = on_message
        self._on_dropped = on_dropped
        self._task: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self.dead = False
        """Its connection broke: a new feed replaces it (one that only lost a channel to a
        slot move stays, open, for the master's other channels)."""

    async def subscribe(self, channel: str) -> None:
        """Subscribe (once) and wait until Redis confirmed it."""
        async with self._connecting:  # concurrent first subscribers connect once
            if self._task is None:
                await self.conn.connect()  # type: ignore[no-untyped-call]
                self._task = asyncio.create_task(self._read(),
                                                 name=f"shard-feed-{self.node.name}")
        if channel not in self.channels:
            self._confirm[channel] = asyncio.get_running_loop().create_future()
            self.channels.add(channel)
            await self.conn.send_command("SSUBSCRIBE", channel)
        future = self._confirm.get(channel)
        if future is not None:
            async with asyncio.timeout(CONFIRM_TIMEOUT):
                await asyncio.shield(future)

    def confirmed(self, channel: str) -> bool:
        """Whether Redis confirmed ``channel`` on this (still open) connection."""
        return channel in self.channels and channel not in self._confirm and \
            self._task is not None and not self._task.done()

    async def unsubscribe(self, channel: str) -> None:
        if channel in self.channels:
            self.channels.discard(channel)
            self._leaving.add(channel)
            await self.conn.send_command("SUNSUBSCRIBE", channel)

    async def _read(self) -> None:
        try:
            while True:
                # RESP3 (redis-py's default): subscription replies and messages are pushes
                self._handle(await self.conn.read_response(push_request=True))
        except (RedisError, OSError, EOFError) as exc:
            log.warning("shard feed %s lost (%s)", self.node.name, exc)
        for future in self._confirm.values():
            if not future.done():
                future.set_exception(ConnectionError(f"feed {self.node.name} lost"))
        self._confirm.clear()
        with contextlib.suppress(RedisError, OSError):
            await self.conn.disconnect()
        self.dead = True
        self._on_dropped(self, sorted(self.channels))

    def _handle(self, response: Any) -> None:
        kind, channel = response[0], response[1].decode()
        if kind == b"smessage":
            self._on_message(response[2])
        elif kind == b"ssubscribe":
            future = self._confirm.pop(channel, None)
            if future is not None and not future.done():
                future.set_result(None)
        elif kind == b"sunsubscribe":
            if channel in self._leaving:
                self._leaving.discard(channel)
            elif channel in self.channels:  # Redis dropped it: its slot has moved
                self.channels.discard(channel)
                self._on_dropped(self, [channel])

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(RedisError, OSError):
            await self.conn.disconnect()


class ShardFeeds:
    """See the module docstring. ``on_message`` gets each note's data; ``on_lost`` the
    channels that were unsubscribed for a while, once they are subscribed again."""

    def __init__(self, nodes: NodeClients, on_message: Callable[[bytes], None],
                 on_lost: Callable[[list[str]], Awaitable[None]]) -> None:
        self._nodes = nodes
        self._on_message = on_message
        self._on_lost = on_lost
        self._feeds: dict[str, _Feed] = {}
        self._where: dict[str, _Feed] = {}
        self._lost: set[str] = set()
        self._repair: asyncio.Task[None] | None = None

    def live(self, channel: str) -> bool:
        """Whether ``channel`` is subscribed and confirmed now (its notes arrive)."""
        feed = self._where.get(channel)
        return feed is not None and feed.confirmed(channel)

    async def add(self, channel: str) -> None:
        """Subscribe ``channel`` on its master (returns when Redis confirmed it)."""
        if channel in self._lost:
            return
        try:
            await self._subscribe(channel)
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            log.warning("cannot subscribe %s yet (%s)", channel, exc)
            self._dropped(None, [channel])

    async def _subscribe(self, channel: str) -> None:
        feed = self._where.get(channel)
        if feed is not None:
            await feed.subscribe(channel)
            return
        node = self._nodes.node_of(channel)
        feed = self._feeds.get(node.name)
        if feed is None:
            feed = self._feeds[node.name] = _Feed(node, self._on_message, self._dropped)
        self._where[channel] = feed
        await feed.subscribe(channel)

    async def remove(self, channel: str) -> None:
        """Stop following ``channel``."""
        self._lost.discard(channel)
        feed = self._where.pop(channel, None)
        if feed is not None:
            with contextlib.suppress(RedisError, OSError):
                await feed.unsubscribe(channel)

    def _dropped(self, feed: _Feed | None, channels: list[str]) -> None:
        if feed is not None and feed.dead and self._feeds.get(feed.node.name) is feed:
            # only a broken feed is forgotten: one still open stays here, where close()
            # finds it (forgetting it on a slot move left its connection open for good)
            self._feeds.pop(feed.node.name, None)
        for channel in channels:
            if self._where.get(channel) is feed or feed is None:
                self._where.pop(channel, None)
                self._lost.add(channel)
        if self._repair is None or self._repair.done():
            self._repair = asyncio.create_task(self._resubscribe(), name="shard-feeds-repair")

    async def _resubscribe(self) -> None:
        while self._lost:
            await self._nodes.refresh_quietly()
            back: list[str] = []
            for channel in sorted(self._lost):
                try:
                    await self._subscribe(channel)
                except (RedisError, RedisClusterException, OSError, TimeoutError):
                    self._where.pop(channel, None)
                    continue
                self._lost.discard(channel)
                back.append(channel)
            if back:
                await self._on_lost(back)
            if self._lost:
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self._repair is not None:
            self._repair.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._repair
        for feed in list(self._feeds.values()):
            await feed.close()
        self._feeds.clear()
        self._where.clear()
