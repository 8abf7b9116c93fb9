"""A run's event log as a server-sent-event stream (docs/events.md is the client's view).

Each subscriber pulls from the log at its own pace (``wait_events`` after the last seq it sent),
so reading consumes nothing, any number may subscribe, and a slow one holds at most one page in
memory and never delays the run or the others: its send blocks only itself. On a backend with
live feeds (both built-in ones) a live run's subscribers are handed each event's frame at
append instead of waking to read the log (``app.delivery.tap``; a slow one holds at most
``live_feed.MAX_PENDING`` frames, then reads the log); the behaviour below is the same. Timeline
of one subscriber::

    retry: <ms> ─ wait_events(after) ─ page ─▶ send ─ … ─ agent_end (depth 0) ─▶ close
    nothing for ``poll`` s ─▶ ``: ping`` ─ run ended and log drained ─▶ close
    run already ended at the start ─▶ replay what is left without waiting ─▶ close
    backend down ─▶ ``: ping`` and retry with backoff (the response stays 200)
    client gone ─▶ noticed at the next send or ping ─▶ generator closed
    client not reading for ``SEND_TIMEOUT`` s ─▶ dropped (it resumes with Last-Event-ID)

(The route answers ``204`` instead when the run has ended and nothing is left after the
client's position: the HTML spec's signal for an ``EventSource`` to stop reconnecting.)

Framing: an event is ``id: <seq>``, ``event: <type>``, ``data: <stored JSON>`` and a blank
line. Nothing else we send ends with a blank line: the ``retry:`` hint is one field line that
joins the next event's block, a ping is one comment line. The HTML spec dispatches nothing for
either, but popular parsers (httpx-sse, @microsoft/fetch-event-source) turn every blank line
into an event, so a blank line that ends a block without ``data`` would reach their callers as
an event with empty data. All frames of one read go out as one body chunk: one ASGI send per
wake-up, not one per event; a caught-up live subscriber's frames are sent from the append
without waking its task (``app.delivery.direct``).

``EventStreamResponse`` is sse-starlette's ``EventSourceResponse`` (headers, HEAD handling,
OpenAPI media type) with a leaner streaming path: pings come from the frame generator when it
has been idle, and one task listens for the disconnect, where the parent runs four (stream,
ping, exit signal, disconnect) — measured at 0.84 → 0.5 ms of CPU per replayed stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse
from starlette.types import Receive, Scope, Send

from app.delivery.direct import DirectSend
from app.delivery.draining import draining
from app.delivery.frames import PING, chunk
from app.delivery.log_pages import PAGE, log_pages
from app.delivery.send_deadline import SendDeadline
from app.delivery.server_send import server_send
from app.delivery.stream_holds import Hold, serve_held
from app.delivery.tap import tapped_frames
from app.store.contract import Backend
from app.store.live_feed import LiveFeeds
from app.store.records import StoredEvent
from app.telemetry import metrics

__all__ = ["PAGE", "PING", "EventStreamResponse", "event_frames", "event_stream",
           "retry_field"]

log = logging.getLogger(__name__)
SEND_TIMEOUT = 30.0
"""Seconds one send may block on a client that does not read before it is dropped."""


def retry_field(milliseconds: int) -> bytes:
    """The ``retry:`` field line: how long a client waits before reconnecting. It opens the
    stream and becomes part of the first event's block (it has no blank line of its own)."""
    return b"retry: %d\n" % milliseconds


async def event_frames(backend: Backend, run_id: str, after: int, poll: float,
                       first: list[StoredEvent] | None = None, *, ended: bool = False,
                       head: bytes = b"") -> AsyncIterator[bytes]:
    """Replay after ``after`` (starting with ``first``, the page already read, if any), then
    tail, until the run's ``agent_end``: one chunk per read, a ping when idle for ``poll`` s or
    while the backend is unreachable (``log_pages``). ``head`` (the ``retry:`` field) opens the
    first chunk; ``ended``: the run had ended when the stream opened (replay what is left,
    never wait)."""
    metrics.SSE_SUBSCRIBERS.inc()
    try:
        if head and not first:
            yield head  # nothing to replay: the client learns ``retry`` before it waits
            head = b""
        async for events in log_pages(backend, run_id, after, poll=poll, ended=ended,
                                      first=first):
            if not events:
                yield PING
                continue
            text, _, done = chunk(events)
            yield head + text
            head = b""
            if done:
                return
    finally:
        metrics.SSE_SUBSCRIBERS.dec()


class EventStreamResponse(EventSourceResponse):
    """See the module docstring. Made with the headers sse-starlette's ``__init__`` gives an
    event stream, without running it: it also makes an anyio lock (asking sniffio which
    library runs) and validates options only its own streaming path uses, ~20 % of a
    stream's start (py-spy, in-process). A request that takes that path (not ``GET``: the
    ``HEAD`` middleware turns ``HEAD`` into ``GET`` before routing) runs it first."""

    def __init__(self, frames: AsyncIterator[bytes], *, send_timeout: float = SEND_TIMEOUT,
                 direct: DirectSend | None = None) -> None:
        self._frames = frames
        self._direct = direct
        """Given to ``frames`` too: they may be sent from outside this task
        (``app.delivery.direct``); a ``b""`` chunk asks to finish such a send first."""
        self.send_timeout = send_timeout
        self.reserved: Hold | None = None
        """The caller's stream hold, taken by the door before it started the work this
        stream shows (``app.api.stream_limits``); released when the stream ends."""
        self.status_code = 200
        self.background = None
        self.raw_headers = list(_stream_headers())

    def _parent_init(self) -> None:
        super().__init__(self._frames, ping=0, send_timeout=self.send_timeout, sep="\n",
                         headers=self.headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # an end user's open streams are counted (``app.delivery.stream_holds``): a door that
        # started work for this stream took its hold first (``reserved``), others take it here
        if self.reserved is None:
            await serve_held(scope, receive, send, lambda: self._respond(scope, receive, send))
            return
        try:
            await self._respond(scope, receive, send)
        finally:
            self.reserved.release()

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"].upper() == "HEAD":
            self._parent_init()
            await super().__call__(scope, receive, send)
            return
        gone = asyncio.Event()
        stop = draining()  # the server is shutting down: end here (``app.delivery.draining``)
        watcher = asyncio.ensure_future(_watch_disconnect(receive, gone))
        deadline = SendDeadline(self.send_timeout)  # one timer per stream, not one per send
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            body_send = server_send(scope) or send  # app.delivery.server_send: body chunks direct
            direct = self._direct
            if direct is not None:
                direct.attach(body_send, gone, stop)
            async for chunk in self._frames:
                if gone.is_set():
                    return
                with deadline:
                    if direct is not None and direct.pending:
                        await direct.finish()
                    if chunk:
                        await body_send({"type": "http.response.body", "body": chunk,
                                         "more_body": True})
                if stop.is_set():
                    break
            if not gone.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not deadline.expired or task is None:
                raise
            task.uncancel()
            log.info("dropped an event stream whose client stopped reading")
        finally:
            if self._direct is not None:
                self._direct.detach()
            deadline.close()
            watcher.cancel()
            aclose = getattr(self._frames, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


@functools.cache
def _stream_headers() -> tuple[tuple[bytes, bytes], ...]:
    """The raw headers sse-starlette gives an event stream (asked once, of a response that
    is never sent: its content is never iterated)."""
    return tuple(EventSourceResponse(iter(()), ping=0, sep="\n").raw_headers)


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    gone.set()


def event_stream(backend: Backend, run_id: str, after: int, *, ping: float, retry: float,
                 first: list[StoredEvent] | None = None,
                 ended: bool = False) -> EventStreamResponse:
    """The SSE response of a run's events after seq ``after`` (``first``: already read;
    ``ended``: the run had ended when it was read). ``retry`` seconds become the ``retry:``
    field that opens the stream. A live run on a backend with ``feeds``
    (``app.store.live_feed``) is streamed from its tap (``app.delivery.tap``)."""
    poll = max(0.05, min(ping, 5.0))
    head = retry_field(max(0, round(retry * 1000)))
    feeds = getattr(backend, "feeds", None)
    if isinstance(feeds, LiveFeeds) and not ended:  # frames handed over as they are appended
        direct = DirectSend()
        return EventStreamResponse(tapped_frames(backend, feeds, run_id, after, poll, first,
                                                 head, direct), direct=direct)
    return EventStreamResponse(event_frames(backend, run_id, after, poll, first, ended=ended,
                                            head=head))
