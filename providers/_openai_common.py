"""What the two OpenAI adapters (Chat Completions and Responses) share.

``drive_stream`` is the one place that opens the HTTP stream, feeds SSE events to a protocol
parser and turns every failure into an ``error`` event, so that each adapter only has to map
wire events to provider events. The open response is closed in a ``finally``: closing the
generator early (abort) closes the connection.

Choices shared by both adapters (documented here once):

- A failed tool result (``is_error``) is sent as its text prefixed with ``"Error: "``: neither
  OpenAI protocol has an error flag on tool output.
- Images inside a tool result cannot ride on the tool message itself (Chat Completions tool
  messages are text only), so the tool output says that images follow and one ``user`` message
  carrying them is inserted after the run of tool results.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Protocol

import httpx

from providers._http import ProviderHTTPError, RetryPolicy, open_stream
from providers._sse import SSEEvent, iter_sse
from providers.events import ErrorEvent, ProviderEvent, StartEvent
from providers.messages import ImageContent, TextContent, ToolResultMessage, Usage

log = logging.getLogger(__name__)

ERROR_PREFIX = "Error: "
IMAGES_FOLLOW = "(images attached in the next message)"


class StreamParser(Protocol):
    """One protocol's wire → provider-event mapping for one response."""

    finished: bool
    """True once ``done`` or ``error`` was produced: nothing more is read."""

    def feed(self, event: SSEEvent) -> list[ProviderEvent]:
        """Events for one SSE event."""
        ...

    def end(self) -> list[ProviderEvent]:
        """Events for the end of the byte stream (``error`` when no terminal event came)."""
        ...

    def fail(self, message: str, *, retryable: bool) -> list[ProviderEvent]:
        """``start`` if not yet sent, then an ``error`` event."""
        ...


def auth_headers(api_key: str | None) -> dict[str, str]:
    """Request headers; ``Authorization`` only when there is a key (never logged)."""
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def data_url(image: ImageContent) -> str:
    """An inline image as a ``data:`` URL."""
    return f"data:{image.mime_type};base64,{image.data}"


def tool_output_text(result: ToolResultMessage) -> str:
    """The text a tool result is sent as (see the module doc for errors and images)."""
    text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
    if any(isinstance(c, ImageContent) for c in result.content):
        text = f"{text}\n{IMAGES_FOLLOW}" if text else IMAGES_FOLLOW
    return ERROR_PREFIX + text if result.is_error else text


def tool_images(results: Sequence[ToolResultMessage]) -> list[tuple[str, ImageContent]]:
    """(tool call id, image) for every image in ``results``, in order."""
    return [(r.tool_call_id, c) for r in results for c in r.content
            if isinstance(c, ImageContent)]


def error_start(model: str, message: str, *, retryable: bool,
                usage: Usage | None = None) -> list[ProviderEvent]:
    """``start`` then ``error``: a stream that failed before its first event."""
    return [StartEvent(model=model),
            ErrorEvent(stop_reason="error", error_message=message, retryable=retryable,
                       usage=usage or Usage())]


async def drive_stream(client: httpx.AsyncClient, request: httpx.Request, retry: RetryPolicy,
                       parser: StreamParser) -> AsyncGenerator[ProviderEvent, None]:
    """Send ``request``, map its SSE events with ``parser``; never raises after the first event."""
    try:
        response = await open_stream(client, request, retry)
    except ProviderHTTPError as exc:
        for event in parser.fail(exc.message, retryable=exc.retryable):
            yield event
        return
    except httpx.HTTPError as exc:
        for event in parser.fail(f"connection failed: {type(exc).__name__}: {exc}",
                                 retryable=True):
            yield event
        return
    try:
        async with aclosing(_parse(response, parser)) as events:
            async for event in events:
                yield event
    finally:
        await response.aclose()


async def _parse(response: httpx.Response,
                 parser: StreamParser) -> AsyncGenerator[ProviderEvent, None]:
    try:
        async for sse in iter_sse(response.aiter_bytes()):
            for event in parser.feed(sse):
                yield event
            if parser.finished:
                return
        tail = parser.end()
    except httpx.HTTPError as exc:
        tail = parser.fail(f"stream broken: {type(exc).__name__}: {exc}", retryable=True)
    except Exception as exc:  # a wire shape we did not expect: still an event, never a raise
        log.exception("unexpected provider stream content")
        tail = parser.fail(f"could not read the provider stream: {exc!r}", retryable=False)
    for event in tail:
        yield event
