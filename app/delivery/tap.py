"""A live run's SSE stream fed by a ``Tap`` (``app.store.live_feed``) instead of a log read
per wake-up: the frames pushed at append are sent as they are, encoded once for every
subscriber of the run. The log is still the truth, read whenever the tap cannot prove the next
frame is the next seq::

    open tap ─ send first page ─ read log after it (until caught up) ─┐
    ┌─────────────────────────────────────────────────────────────────┘
    └─ take frames ─ seq = last+1? ─ yes ─▶ send (one chunk per take) ─ … agent_end ─▶ close
                                   ─ at or below last ─▶ dropped (sent already)
                                   ─ beyond last+1 or resync ─▶ read log after last
       nothing for ``poll`` s ─▶ run ended? read what is left, close : ``: ping``

Same framing, pings, backend-down behaviour and end as ``app.delivery.sse.event_frames``.

With ``out`` (``app.delivery.direct``), a subscriber that has caught up parks its task on the tap
and lets the append send each next frame in place (``_Direct``): no task woken per frame. Whatever
that path declines (a gap, the stream's end, a send that could not finish at once, a client
gone) is held on the tap and wakes the task, which goes on as above from the last seq sent; a
wake-up for an unfinished send yields ``b""`` so the response finishes it before anything else.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from app.delivery.direct import DirectSend
from app.delivery.frames import PING, chunk
from app.delivery.log_pages import PAGE, log_pages, run_ended
from app.store.contract import Backend
from app.store.errors import BackendError
from app.store.live_feed import Frame, LiveFeeds, Tap
from app.store.records import StoredEvent
from app.telemetry import metrics

log = logging.getLogger(__name__)


async def tapped_frames(backend: Backend, feeds: LiveFeeds, run_id: str, after: int,
                        poll: float, first: list[StoredEvent] | None, head: bytes,
                        out: DirectSend | None = None) -> AsyncIterator[bytes]:
    """See the module docstring (the arguments are ``app.delivery.sse.event_frames``'s;
    ``out``: the response's way to send frames from the append)."""
    metrics.SSE_SUBSCRIBERS.inc()
    tap = feeds.open(run_id, poll)
    try:
        last = after
        if first:
            text, last, done = chunk(first)
            yield head + text
            if done:
                return
        elif head:
            yield head  # nothing to replay: the client learns ``retry`` before it waits
        behind = True  # the tap holds only what came after it opened: read the log first
        following = False
        while True:
            if behind or tap.resync:
                tap.resync = behind = False
                async for events in log_pages(backend, run_id, last, poll=poll, ended=True,
                                              follow=None if following else feeds.follow):
                    if not events:  # the store is unreachable: retried
                        yield PING
                        continue
                    text, last, done = chunk(events)
                    yield text
                    if done:
                        return
                following = True  # before the log was read: no news is missed after it
                continue
            frames = tap.take()
            if frames:
                text, last, done, behind = _next(frames, last)
                if text:
                    yield text
                if done:
                    return
                continue
            if out is None:
                woke = await tap.wait()
            else:
                direct = _Direct(out, tap, last)
                tap.deliver = direct
                try:
                    woke = await tap.wait()
                finally:
                    tap.deliver = None
                last = direct.last
                if out.pending:
                    yield b""  # the response finishes that send (or raises) before the next
            if woke:
                continue
            try:  # idle for ``poll`` s: ended (status first, then what is left) or ping
                await feeds.follow(run_id)
                ended = await run_ended(backend, run_id)
                events = await backend.read_events(run_id, last, PAGE)
            except BackendError:  # the next idle wait is the retry's delay
                yield PING
                continue
            if events:
                behind = len(events) >= PAGE
                text, last, done = chunk(events)
                yield text
                if done:
                    return
            elif ended:
                return
            else:
                yield PING
    finally:
        tap.close()
        metrics.SSE_SUBSCRIBERS.dec()


def _next(frames: list[Frame], last: int) -> tuple[bytes, int, bool, bool]:
    """(the frames that follow ``last`` as one chunk, the new last seq, whether the stream
    ends, whether a gap was found: the log must be read)."""
    out: list[bytes] = []
    for seq, data, ends in frames:
        if seq <= last:
            continue
        if seq != last + 1:
            return b"".join(out), last, False, True
        out.append(data)
        last = seq
        if ends:
            return b"".join(out), last, True, False
    return b"".join(out), last, False, False


class _Direct:
    """``Tap.deliver`` of a parked subscriber: sends the frames that follow ``last`` through
    ``out`` and takes them; declines (False) a gap, the stream's end, or when ``out`` cannot
    send now."""

    __slots__ = ("_out", "_wake", "last")

    def __init__(self, out: DirectSend, tap: Tap, last: int) -> None:
        self._out = out
        self._wake = tap.wake
        self.last = last

    def __call__(self, frames: list[Frame]) -> bool:
        if not self._out.ready:
            return False
        text, last, done, gap = _next(frames, self.last)
        if done or gap:
            return False
        if text:
            self.last = last
            self._out.send(text, self._wake)
        return True
