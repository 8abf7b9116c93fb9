"""Live SSE frames handed to a process's subscribers as events are appended.

A backend that learns of new events in this process (the in-process one at append; Redis from
its notes) pushes them here. For a run with subscribers, each event's SSE frame is encoded once
and the same bytes are handed to every subscriber's ``Tap``: no re-read of the log and no
re-encoding per subscriber, and a waiting subscriber is woken through one future::

    append ─ push(run, events) ─ frames encoded once ─┬─ tap A: pending += frames, wake
                                                      └─ tap B: pending += frames, wake

A tap is a hint, not the log: ``app.delivery.sse`` keeps the seq it sent last, drops frames at or
below it and reads the log whenever the next frame is not the next seq (a tap opened after the
subscriber's first read, a note Redis lost, a batch too large for its note), so the handoff
from replay to live is gapless and sends nothing twice. ``resync`` tells a run's taps that
frames may have been missed (Redis reconnected) without any frame to show it.

A subscriber that has caught up may set ``Tap.deliver``: while nothing is pending, ``push``
offers it the frames first, and it sends them to the client in place (``app.delivery.tap``,
``app.delivery.direct``) or declines, and they are held and the subscriber woken as above.

Idle: one timer per tap, re-armed only when it fires (not one per wait): ``wait`` returns False
once nothing arrived for ``idle`` seconds, the subscriber's cue to ping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import orjson

from app.store.records import StoredEvent

MAX_PENDING = 1000
"""Frames a tap holds for a subscriber that is not taking them (blocked sending to a slow
client); past it they are dropped and it reads the log instead, as without a tap."""
Frame = tuple[int, bytes, bool]
"""(seq, the SSE frame, whether it ends the stream: the run's own ``agent_end``)."""



def frame(event: StoredEvent) -> bytes:
    """One SSE frame; the stored JSON never holds a raw newline (orjson escapes them)."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, event.type.encode(), event.data)


def ends_stream(event: StoredEvent) -> bool:
    """``agent_end`` of the run's own loop (nested loops end with depth > 0)."""
    if event.type != "agent_end":
        return False
    return int(orjson.loads(event.data).get("depth", 0)) == 0


class Tap:
    """One subscriber's pending frames of one run (see the module docstring)."""

    __slots__ = ("_active", "_feeds", "_idle", "_loop", "_timer", "_waiter", "deliver",
                 "pending", "resync", "run_id")

    def __init__(self, feeds: LiveFeeds, run_id: str, idle: float) -> None:
        self._feeds = feeds
        self.run_id = run_id
        self.pending: list[Frame] = []
        self.resync = False
        """Frames may have been missed: read the log."""
        self.deliver: Callable[[list[Frame]], bool] | None = None
        """Set by a caught-up subscriber: offered frames while none are pending; True when
        it took them (sent or dropped as sent already), False to have them held."""
        self._idle = idle
        self._loop = asyncio.get_running_loop()
        self._active = self._loop.time()
        self._waiter: asyncio.Future[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def take(self) -> list[Frame]:
        """The frames pushed since the last take."""
        frames, self.pending = self.pending, []
        return frames

    def wake(self) -> None:
        """Frames arrived (or ``resync``): a waiting ``wait`` returns True."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    async def wait(self) -> bool:
        """Until frames arrive or ``resync`` (True), or ``idle`` s passed without (False)."""
        if self.pending or self.resync:
            self._active = self._loop.time()
            return True
        waiter: asyncio.Future[bool] = self._loop.create_future()
        self._waiter = waiter
        if self._timer is None:
            self._timer = self._loop.call_at(self._active + self._idle, self._check)
        try:
            woke = await waiter
        finally:
            self._waiter = None
        self._active = self._loop.time()
        return woke

    def _check(self) -> None:
        now = self._loop.time()
        due = self._active + self._idle
        if now < due:
            self._timer = self._loop.call_at(due, self._check)
            return
        self._timer = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(False)
        else:
            self._active = now

    def close(self) -> None:
        """Stop receiving frames."""
        self.deliver = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._feeds.remove(self)


class LiveFeeds:
    """The taps of every run subscribed in this process."""

    def __init__(self, follow: Callable[[str], Awaitable[None]] | None = None) -> None:
        self._taps: dict[str, list[Tap]] = {}
        self._follow = follow

    async def follow(self, run_id: str) -> None:
        """Make sure news of ``run_id`` reaches this process (Redis: its notes subscribed)
        before the subscriber reads the log; again when idle (a lost subscription comes back)."""
        if self._follow is not None:
            await self._follow(run_id)

    def open(self, run_id: str, idle: float) -> Tap:
        """A tap on ``run_id``'s frames pushed from now on."""
        tap = Tap(self, run_id, idle)
        self._taps.setdefault(run_id, []).append(tap)
        return tap

    def remove(self, tap: Tap) -> None:
        """``Tap.close``."""
        taps = self._taps.get(tap.run_id)
        if taps is not None and tap in taps:
            taps.remove(tap)
            if not taps:
                del self._taps[tap.run_id]

    def watched(self, run_id: str) -> bool:
        """Whether ``run_id`` has a tap here."""
        return run_id in self._taps

    def push(self, run_id: str, events: Iterable[StoredEvent]) -> None:
        """New events of ``run_id``, consecutive seqs in order: frames for its taps."""
        taps = self._taps.get(run_id)
        if not taps:
            return
        frames = [(e.seq, frame(e), e.type == "agent_end" and ends_stream(e)) for e in events]
        for tap in taps:
            deliver = tap.deliver
            if deliver is not None and not tap.pending and not tap.resync and deliver(frames):
                tap._active = tap._loop.time()  # activity: no idle ping due while it lasts
                continue
            if len(tap.pending) >= MAX_PENDING:  # a subscriber not keeping up reads the log
                tap.pending = []
                tap.resync = True
            else:
                tap.pending += frames
            tap.wake()

    def resync(self, run_id: str | None = None) -> None:
        """Frames of ``run_id`` (None: of every run) may have been missed: its taps re-read."""
        runs = list(self._taps) if run_id is None else [run_id]
        for run in runs:
            for tap in self._taps.get(run, ()):
                tap.resync = True
                tap.wake()
