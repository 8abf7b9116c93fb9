"""``GET /threads/{id}/events``: one SSE stream across all the runs of a thread.

The runs' own logs are read in the thread's order, each from its first event to its
``agent_end`` (depth 0), and the stream then waits for the thread's next run and tails it:
nothing is copied, a thread adds no writes to a run. Every event carries its ``run_id``; the
SSE ``id`` is ``<n>-<seq>``, the run's 1-based position in the thread and the event's seq in
that run's log, so ``Last-Event-ID`` resumes across run boundaries. Timeline::

    retry: ─ run 1: replay/tail ─ agent_end ─ run 2: … ─ agent_end ─ wait for run 3 ─ : ping …
    the thread deleted (or expired) ─▶ the stream closes

While the stream waits at the end of the thread it also settles the thread if its active run
has ended (a worker that died in between leaves that to a reader: ``app.api.thread_view``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

from app.delivery.frames import PING
from app.delivery.log_pages import PAGE, Backoff, log_pages
from app.delivery.sse import EventStreamResponse, retry_field
from app.store.contract import Backend
from app.store.errors import BackendError
from app.store.records import StoredEvent
from app.store.threads import settled
from app.telemetry import metrics

log = logging.getLogger(__name__)
POSITION = re.compile(r"(\d{1,9})-(\d{1,19})")
"""``<n>-<seq>``: the SSE id of a thread stream's event."""


def parse_position(value: str | None) -> tuple[int, int] | None:
    """``(n, seq)`` of a ``Last-Event-ID`` / ``?after=`` value; ``(1, 0)`` for none; None when
    it is not a position this stream sent."""
    if not value:
        return 1, 0
    match = POSITION.fullmatch(value)
    if match is None or int(match[2]) > 2**63 - 1:
        return None
    return max(1, int(match[1])), int(match[2]) if int(match[1]) > 0 else 0


def thread_frame(n: int, event: StoredEvent) -> bytes:
    """One SSE frame of a thread stream (the run's stored JSON as ``data``)."""
    return b"id: %d-%d\nevent: %s\ndata: %s\n\n" % (n, event.seq, event.type.encode(),
                                                      event.data)


@dataclass(slots=True)
class _Cursor:
    """Where a subscriber is: run ``n`` (1-based) of ``runs``, after ``seq``."""

    n: int
    seq: int
    runs: list[str] = field(default_factory=list)

    def next_run(self) -> None:
        self.n, self.seq = self.n + 1, 0


def _ends_run(event: StoredEvent) -> bool:
    """The run's own ``agent_end`` (a nested loop's has ``depth`` > 0)."""
    return event.type == "agent_end" and int(orjson.loads(event.data).get("depth", 0)) == 0


def _frames(cursor: _Cursor, events: list[StoredEvent]) -> bytes:
    out = []
    for event in events[:PAGE]:
        out.append(thread_frame(cursor.n, event))
        cursor.seq = event.seq
        if _ends_run(event):
            cursor.next_run()
            break
    return b"".join(out)


async def _at_end(backend: Backend, thread_id: str, cursor: _Cursor, poll: float
                  ) -> bytes | None:
    """Past the last run: wait for the next one (None: the thread is gone)."""
    record = await backend.wait_thread(thread_id, len(cursor.runs), poll)
    if record is None:
        return None
    if len(record.runs) > len(cursor.runs):
        cursor.runs = record.runs
        return b""
    await settled(backend, record)
    return PING


async def thread_frames(backend: Backend, thread_id: str, start: tuple[int, int],
                        runs: list[str], poll: float, head: bytes) -> AsyncIterator[bytes]:
    """The thread's events after ``start`` (``(n, seq)``), live, until the thread is gone:
    each run's log through ``log_pages`` (store outages ridden out alike), then a wait for
    the thread's next run."""
    metrics.SSE_SUBSCRIBERS.inc()
    cursor = _Cursor(*start, runs=runs)
    backoff = Backoff(poll)
    try:
        yield head
        while True:
            if cursor.n <= len(cursor.runs):
                n = cursor.n
                async for events in log_pages(backend, cursor.runs[n - 1], cursor.seq,
                                              poll=poll):
                    if not events:
                        yield PING
                        continue
                    yield _frames(cursor, events)
                    if cursor.n != n:  # its agent_end: on to the next run
                        break
                else:
                    cursor.next_run()  # ended without an agent_end (never started, expired)
                continue
            try:
                chunk = await _at_end(backend, thread_id, cursor, poll)
            except BackendError as exc:
                log.warning("event stream of thread %s: backend unavailable (%s); retrying",
                            thread_id, exc)
                yield PING
                await backoff.wait()
                continue
            backoff.reset()
            if chunk is None:
                return
            if chunk:
                yield chunk
    finally:
        metrics.SSE_SUBSCRIBERS.dec()


def thread_stream(backend: Backend, thread_id: str, start: tuple[int, int], runs: list[str],
                  *, ping: float, retry: float) -> EventStreamResponse:
    """The SSE response of a thread's events after ``start``."""
    poll = max(0.05, min(ping, 5.0))
    head = retry_field(max(0, round(retry * 1000)))
    return EventStreamResponse(thread_frames(backend, thread_id, start, runs, poll, head))
