"""A run's stored log as a dialect's SSE body: replay from seq 1, then live, until the end.

Timeline of one projected stream::

    read page ─▶ project each event ─▶ frames of events after ``after`` ─▶ send ─ … ─▶
    agent_end (depth 0) ─▶ ``projector.finish()`` frames ─▶ close
    run parked (requires_action) on picks the projector hands to its client, every event
        read ─▶ ``projector.pause()`` and ``finish()`` frames ─▶ close (the client answers
        in its next request; the run holds nothing while it waits)
        (the park wakes the tail's wait: the stream ends within ms of the park, not after
        its idle poll)
    nothing for ``poll`` s ─▶ ``: ping`` (a comment line: no parser dispatches it)
    backend down ─▶ ``: ping`` and retry with backoff (the response stays 200)
    client gone before the end ─▶ the run goes on (durable), unless ``cancel_on_disconnect``

The projector sees every event from seq 1 even when the client resumes after a later seq, so
its state (open text blocks, tool calls, nested runs) is the same on every replay; only the
frames of events at or before ``after`` are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

import orjson

from app.delivery.frames import PING
from app.delivery.log_pages import log_pages
from app.store.contract import Backend
from app.store.errors import BackendError
from app.store.records import StoredEvent
from app.telemetry import metrics

log = logging.getLogger(__name__)


class Projector(Protocol):
    """Turns native events (decoded JSON, in log order) into a dialect's SSE frames."""

    def feed(self, event: dict[str, Any]) -> list[bytes]:
        """The frames of one event (often none)."""
        ...

    def finish(self) -> list[bytes]:
        """The frames that close the stream after the run's own ``agent_end``."""
        ...

    def waits_on_client(self) -> bool:
        """Whether the run waits for picks this dialect hands to its client (the stream then
        ends at the park, as the toolkit expects, and the client's next request answers)."""
        ...

    def pause(self) -> list[bytes]:
        """The frames that end the stream at such a park (``finish`` follows)."""
        ...


def poll_seconds(ping: float) -> float:
    """How long a stream waits for events before it pings (``AGENTLOOP_SSE_PING_SECONDS``, at
    most 5 s, as the native stream)."""
    return max(0.05, min(ping, 5.0))


def ends_run(event: dict[str, Any]) -> bool:
    """The run's own (``depth`` 0) ``agent_end``: the last event of its log."""
    return event.get("type") == "agent_end" and not event.get("depth")


async def projected_frames(backend: Backend, run_id: str, projector: Projector, *,
                           after: int = 0, poll: float = 5.0,
                           cancel_on_disconnect: bool = False) -> AsyncIterator[bytes]:
    """The dialect's body for ``run_id`` (see the module docstring)."""
    finished, last = False, 0
    metrics.SSE_SUBSCRIBERS.inc()
    try:
        async for events in log_pages(backend, run_id, 0, poll=poll,
                                      parked=projector.waits_on_client):
            if not events:
                if await _parked_for_client(backend, run_id, projector, last):
                    finished = True
                    yield b"".join(projector.pause())
                    break
                yield PING
                continue
            chunk, finished = _project(projector, events, after)
            last = events[-1].seq
            if chunk:
                yield chunk
            if not finished and await _parked_for_client(backend, run_id, projector, last):
                yield b"".join(projector.pause())
                finished = True
            if finished:
                break
        finished = True
        yield b"".join(projector.finish())
    finally:
        metrics.SSE_SUBSCRIBERS.dec()
        if not finished and cancel_on_disconnect:
            await _cancel(backend, run_id)


async def _parked_for_client(backend: Backend, run_id: str, projector: Projector,
                             last: int) -> bool:
    """Whether the run is parked on picks the projector handed to its client, with every
    event up to the park read (the status is written after the park's events: nothing after
    ``last`` then means the stream has shown them all)."""
    if not projector.waits_on_client():
        return False
    try:
        record = await backend.get_run(run_id)
        if record is None or record.status != "requires_action":
            return False
        return not await backend.read_events(run_id, last, 1)
    except BackendError:
        return False


def _project(projector: Projector, events: list[StoredEvent], after: int) -> tuple[bytes, bool]:
    """(the frames of a page's events after ``after``, whether the run's end was among them)."""
    frames: list[bytes] = []
    for stored in events:
        event = orjson.loads(stored.data)
        out = projector.feed(event)
        if stored.seq > after:
            frames.extend(out)
        if ends_run(event):
            return b"".join(frames), True
    return b"".join(frames), False


async def _cancel(backend: Backend, run_id: str) -> None:
    """The client asked for its disconnect to stop the run (the toolkit's stop/abort)."""
    try:
        await backend.request_cancel(run_id)
        log.info("client disconnected: run cancelled as asked", extra={"run_id": run_id})
    except BackendError as exc:
        log.warning("could not cancel %s after its client left: %s", run_id, exc)
