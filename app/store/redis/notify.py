"""One pub/sub listener per process: wakes event tails and cancel watchers.

Writers publish on ``al:notify`` after each appended batch: a header line
``e:<run>:<first seq>:<last seq>`` followed by the batch itself (one ``seq\ttype\tdata`` line
per event; left out when the batch is large), ``c:<run>`` on cancel and ``p:<run>`` when the
run parks (its tails wake to see the status: a dialect's stream ends there). Subscribers never hold
a Redis connection of their own: they wait on an ``asyncio.Event`` here. A run's SSE
subscribers here are handed each batch as frames through ``feeds``
(``app.store.live_feed``); for runs a tail in this process watches, the listener also keeps
the run's last seq and its latest batch, so a tail that keeps up takes the new events straight
from the note: no XRANGE per batch (it was the largest share of Redis round trips per run).
Anything it cannot prove contiguous is read from the log.

Timeline (one SSE tail)::

    wait_events ─ register waiter ─ last seq known = after? ─ yes ─ await ─┐
                                                 └─ no ─ XRANGE ─▶ events  │
    worker ─ append script: XADD … PUBLISH e:run:… ─▶ listener ─ keep batch, wake ─┘─▶ events

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

from app.store.live_feed import LiveFeeds
from app.store.records import StoredEvent
from app.store.redis.keys import NOTIFY_CHANNEL
from app.store.redis.notes_reader import LeanParams, lean_params, open_notes

log = logging.getLogger(__name__)
LEAN_READER = True
"""Read notes through ``redis_notes_reader`` where it applies (False: redis-py's pub/sub)."""
WATCH_TTL = 60.0
"""Seconds a run stays watched after its last tail read (then its batch is forgotten)."""


def parse_head(data: bytes) -> tuple[str, str, int, int, bytes] | None:
    """``(kind, run_id, first_seq, last_seq, batch bytes)`` of a note, its batch left unread
    (seqs 0 and no batch for ``c:`` and ``p:`` notes); None when malformed."""
    head, _, rest = data.partition(b"\n")
    parts = head.decode().split(":")
    if len(parts) == 2:
        return parts[0], parts[1], 0, 0, b""
    if len(parts) != 4 or parts[0] != "e":
        return None
    return "e", parts[1], int(parts[2]), int(parts[3]), rest


def parse_batch(first: int, last: int, rest: bytes) -> list[StoredEvent] | None:
    """An ``e:`` note's batch (``parse_head``'s last three), None when absent or not exactly
    the seqs ``first``..``last``."""
    if not rest:
        return None
    batch = []
    for line in rest.split(b"\n"):
        seq, type_, body = line.split(b"\t", 2)
        batch.append(StoredEvent(int(seq), type_.decode(), body))
    if [e.seq for e in batch] != list(range(first, last + 1)):
        return None
    return batch


class Notifier:
    """The listener task and the waiters it wakes (created lazily on first use)."""

    def __init__(self, client: Redis | None, recheck: Callable[[str], Awaitable[bool]]) -> None:
        self._client = client
        self._recheck = recheck
        self._events: dict[str, asyncio.Event] = {}
        self._cancels: dict[str, asyncio.Event] = {}
        self._watched: dict[str, float] = {}
        """run_id → when a tail last read it (only these runs' batches are kept)."""
        self._last: dict[str, int] = {}
        self._batch: dict[str, list[StoredEvent]] = {}
        self._sweep_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.feeds = LiveFeeds(follow=self.follow)
        """SSE subscribers' taps here, handed each note's batch as frames (``app.delivery.tap``)."""

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

    async def follow(self, run_id: str) -> None:
        """Make sure notes about ``run_id`` reach this process (here: every note does)."""
        await self.ensure_started()

    def events_waiter(self, run_id: str) -> asyncio.Event:
        """The event set when ``run_id`` gets new events (shared by its subscribers)."""
        event = self._events.get(run_id)
        if event is None:
            event = self._events[run_id] = asyncio.Event()
        return event

    def watch(self, run_id: str) -> int | None:
        """Mark ``run_id`` watched; its last seq as the notes tell it (None: not known)."""
        self._watched[run_id] = asyncio.get_running_loop().time()
        return self._last.get(run_id)

    def events_after(self, run_id: str, after: int) -> list[StoredEvent] | None:
        """The events after ``after`` from the run's latest note, if it covers them all."""
        batch = self._batch.get(run_id)
        if not batch or not batch[0].seq <= after + 1 <= batch[-1].seq:
            return None
        return batch[after + 1 - batch[0].seq:]

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
        assert self._client is not None
        lean = lean_params(self._client) if LEAN_READER else None
        while True:
            try:
                if lean is not None:
                    await self._listen_lean(lean)
                else:
                    await self._listen_pubsub(self._client)
            except (RedisError, OSError, TimeoutError) as exc:  # ConnectionError is an OSError
                log.warning("notify listener lost Redis (%s); reconnecting", exc)
                await asyncio.sleep(0.2)

    async def _listen_lean(self, params: LeanParams) -> None:
        """Notes read in the connection's callback (``redis_notes_reader``)."""
        conn = await open_notes(params, NOTIFY_CHANNEL, self._note)
        try:
            self._ready.set()
            await self._after_reconnect()
            await asyncio.shield(conn.closed)
            raise ConnectionError("notes connection closed")
        finally:
            conn.close()

    async def _listen_pubsub(self, client: Redis) -> None:
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(NOTIFY_CHANNEL)
            self._ready.set()
            await self._after_reconnect()
            # listen() blocks in one read per message; get_message(timeout=...) cost
            # ~15 µs more per note (a timeout scope each), one note per written batch
            async for message in pubsub.listen():
                self._dispatch(message)
        finally:
            await _quiet_close(pubsub)

    def _dispatch(self, message: dict[str, Any]) -> None:
        data = message.get("data")
        if isinstance(data, bytes):
            self._note(data)

    def _note(self, data: bytes) -> None:
        try:
            head = parse_head(data)
        except (ValueError, UnicodeDecodeError):
            head = None
        if head is None:
            return
        kind, run_id, first, last, rest = head
        if kind == "e":
            self._hand_over(run_id, first, last, rest)
            event = self._events.pop(run_id, None)
        elif kind == "p":  # parked: its readers look at the status (no event was added)
            event = self._events.pop(run_id, None)
        else:
            event = self._cancels.get(run_id)
        if event is not None:
            event.set()

    def _hand_over(self, run_id: str, first: int, last: int, rest: bytes) -> None:
        """An ``e:`` note's batch to the run's tails and feeds here. It is parsed only for a
        run someone here follows: with ``--processes N`` every process hears every other's
        notes too. A malformed batch is read from the log instead."""
        watched, fed = run_id in self._watched, self.feeds.watched(run_id)
        if not (watched or fed):
            return
        try:
            batch = parse_batch(first, last, rest)
        except (ValueError, UnicodeDecodeError):
            batch = None
        if watched:
            self._remember(run_id, last, batch)
        if fed:
            if batch is None:
                self.feeds.resync(run_id)  # the note did not carry it: read the log
            else:
                self.feeds.push(run_id, batch)

    def _remember(self, run_id: str, last: int, batch: list[StoredEvent] | None) -> None:
        self._last[run_id] = last
        if batch is None:
            self._batch.pop(run_id, None)
        else:
            self._batch[run_id] = batch
        now = asyncio.get_running_loop().time()
        if now >= self._sweep_at:
            self._sweep_at = now + WATCH_TTL / 4
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        for stale in [r for r, t in self._watched.items()
                      if now - t > WATCH_TTL and not self.feeds.watched(r)]:
            self._forget(stale)

    def _forget(self, run_id: str) -> None:
        self._watched.pop(run_id, None)
        self._last.pop(run_id, None)
        self._batch.pop(run_id, None)

    async def _after_reconnect(self) -> None:
        self._last.clear()  # notes sent while disconnected are lost: knowledge is stale
        self._batch.clear()
        self.feeds.resync()
        events, self._events = self._events, {}
        for event in events.values():
            event.set()
        for run_id, event in list(self._cancels.items()):
            if await self._recheck(run_id):
                event.set()


async def _quiet_close(pubsub: Any) -> None:
    with contextlib.suppress(RedisError, OSError):
        await pubsub.aclose()
