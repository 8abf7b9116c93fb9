"""A run's event log as a server-sent-event stream.

Each subscriber pulls from the log at its own pace (``read_events`` after the last seq it sent,
then ``wait_events``), so reading consumes nothing, any number may subscribe, and a slow one
holds at most one page in memory and never delays the run or the others: the send blocks only
its own generator. Timeline of one subscriber::

    replay  read_events(after) page by page ──▶ live  wait_events(last, poll) ──▶ …
    agent_end (depth 0) sent ───────────────▶ close
    poll timed out, run ended, log drained ──▶ close   (a run that ended without agent_end)
    backend down ───────────────────────────▶ retry with backoff; pings keep the stream open

Frames: ``id: <seq>``, ``event: <type>``, ``data: <stored JSON>``; ``: ping`` comments every
``ping`` seconds (sse-starlette's ping task, independent of the event flow). All frames of one
backend read go out as one body chunk: one ASGI send per wake-up, not one per event (per-send
overhead was the largest single cost of a streamed run). A client that stops reading for
``SEND_TIMEOUT`` seconds is dropped; it can reconnect with ``Last-Event-ID``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent

from app import metrics
from app.backends.base import TERMINAL, Backend, BackendError, StoredEvent

log = logging.getLogger(__name__)
PAGE = 200
"""Events read per backend call during replay (bounds a subscriber's buffer)."""
SEND_TIMEOUT = 30.0
"""Seconds one send may block on a client that does not read before it is dropped."""


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping")


def frame(event: StoredEvent) -> bytes:
    """One SSE frame; the stored JSON never holds a raw newline (orjson escapes them)."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, event.type.encode(), event.data)


def _ends_stream(event: StoredEvent) -> bool:
    """``agent_end`` of the run's own loop (nested loops end with depth > 0)."""
    if event.type != "agent_end":
        return False
    return int(orjson.loads(event.data).get("depth", 0)) == 0


async def _ended(backend: Backend, run_id: str) -> bool:
    record = await backend.get_run(run_id)
    return record is None or record.status in TERMINAL


async def _next_events(backend: Backend, run_id: str, after: int,
                       poll: float) -> list[StoredEvent] | None:
    """The next events after ``after``; None once the run ended and its log is drained."""
    events = await backend.read_events(run_id, after, PAGE)
    if events:
        return events
    events = await backend.wait_events(run_id, after, poll)
    if events:
        return events[:PAGE]
    if await _ended(backend, run_id):
        return await backend.read_events(run_id, after, PAGE) or None
    return []


async def _retrying(backend: Backend, run_id: str, after: int,
                    poll: float) -> list[StoredEvent] | None:
    """``_next_events``, waiting out backend outages (the ping task keeps the client)."""
    delay = 0.1
    while True:
        try:
            return await _next_events(backend, run_id, after, poll)
        except BackendError as exc:
            log.warning("event stream of %s: backend unavailable (%s); retrying", run_id, exc,
                        extra={"run_id": run_id})
            await asyncio.sleep(delay)
            delay = min(delay * 2, poll)


async def event_frames(backend: Backend, run_id: str, after: int,
                       poll: float) -> AsyncIterator[bytes]:
    """Replay after ``after``, then tail, until the run's ``agent_end``; one chunk per read."""
    metrics.SSE_SUBSCRIBERS.inc()
    try:
        last = after
        while True:
            events = await _retrying(backend, run_id, last, poll)
            if events is None:
                return
            chunk = []
            for event in events:
                chunk.append(frame(event))
                last = event.seq
                if _ends_stream(event):
                    yield b"".join(chunk)
                    return
            yield b"".join(chunk)
    finally:
        metrics.SSE_SUBSCRIBERS.dec()


def event_stream(backend: Backend, run_id: str, after: int, *, ping: float) -> EventSourceResponse:
    """The SSE response of a run's events after seq ``after``."""
    poll = max(0.05, min(ping, 5.0))
    return EventSourceResponse(event_frames(backend, run_id, after, poll), ping=ping,
                               ping_message_factory=_ping, sep="\n", send_timeout=SEND_TIMEOUT)
