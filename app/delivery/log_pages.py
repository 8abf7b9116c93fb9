"""A run's log read page by page for a stream, riding out store outages: what every stream
that reads the log shares (the run stream and its tap, the dialects' tail, the thread
stream)::

    read after ``last`` ─ a page ─▶ yield it ─ … ─ the run has ended, nothing left ─▶ return
    nothing for ``poll`` s ─▶ yield [] (the caller pings)
    the store unreachable ─▶ log, yield [] (the caller pings), retry after 0.1 s, doubling up
                             to ``poll`` (the response stays 200)

``ended`` (the run had ended when the stream opened, or a live stream catching up): read what
is there, never wait; the pages end at the first short one. A caller stops at the run's own
``agent_end`` by leaving the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from app.store.contract import Backend
from app.store.errors import BackendError
from app.store.records import TERMINAL, StoredEvent

log = logging.getLogger(__name__)
PAGE = 200
"""Events read per backend call (bounds a subscriber's buffer)."""


class Backoff:
    """The retry delay after a failed store read: 0.1 s, doubling up to ``ceiling``."""

    def __init__(self, ceiling: float) -> None:
        self.ceiling = ceiling
        self.delay = 0.1

    async def wait(self) -> None:
        """Sleep the current delay, then double it."""
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.ceiling)

    def reset(self) -> None:
        """A read succeeded."""
        self.delay = 0.1


async def run_ended(backend: Backend, run_id: str) -> bool:
    """Whether the run is gone or its status is terminal."""
    record = await backend.get_run(run_id)
    return record is None or record.status in TERMINAL


async def next_page(backend: Backend, run_id: str, after: int, poll: float,
                    ended: bool, parked: bool = False) -> list[StoredEvent] | None:
    """The events after ``after`` ([] after ``poll`` s of nothing, or as soon as the run is
    parked if ``parked``); None once the run has ended and its log is read (``ended``: it
    had, read without waiting)."""
    if ended:
        return await backend.read_events(run_id, after, PAGE) or None
    events = await backend.wait_events(run_id, after, poll, parked=parked)
    if events:
        return events[:PAGE]
    if await run_ended(backend, run_id):  # the status first, then what is left
        return await backend.read_events(run_id, after, PAGE) or None
    return []


async def log_pages(backend: Backend, run_id: str, after: int, *, poll: float,
                    ended: bool = False, first: list[StoredEvent] | None = None,
                    follow: Callable[[str], Awaitable[None]] | None = None,
                    parked: Callable[[], bool] | None = None
                    ) -> AsyncIterator[list[StoredEvent]]:
    """See the module docstring (``first``: a page already read, yielded first; ``follow``:
    called before the first read, retried like a read: a live feed's subscription, so no
    news is missed after the log is read; ``parked``: whether the caller wants to hear of a
    park now, an empty page then coming as soon as the run parks)."""
    last = after
    if first:
        yield first
        last = first[-1].seq
        if ended and len(first) < PAGE:
            return
    backoff = Backoff(poll)
    while True:
        try:
            if follow is not None:
                await follow(run_id)
                follow = None
            events = await next_page(backend, run_id, last, poll, ended,
                                     parked is not None and parked())
        except BackendError as exc:
            log.warning("event stream of %s: backend unavailable (%s); retrying", run_id, exc,
                        extra={"run_id": run_id})
            yield []
            await backoff.wait()
            continue
        backoff.reset()
        if events is None:
            return
        if events:
            last = events[-1].seq
        yield events
        if ended and len(events) < PAGE:
            return
