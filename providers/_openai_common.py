"""What the two OpenAI adapters (Chat Completions and Responses) share.

``SSEEndpoint.stream`` is each adapter's whole ``stream``: it encodes the JSON body, POSTs it and
runs the response through ``guarded_stream`` (the frame every adapter shares: retries, ``start``
first, exactly one ``done``/``error``, the response closed on every path) with an
``SSEParserDecoder``, so that each adapter only supplies its body and a ``StreamParser`` mapping
wire to events.

Choices shared by both adapters (documented here once):

- A failed tool result (``is_error``) is sent as its text prefixed with ``"Error: "``: neither
  OpenAI protocol has an error flag on tool output.
- Images inside a tool result cannot ride on the tool message itself (Chat Completions tool
  messages are text only), so the tool output says that images follow and one ``user`` message
  carrying them is inserted after the run of tool results.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from providers._http import RetryPolicy, body_chunks
from providers._prepared import PreparedPost
from providers._sse import SSEEvent, iter_sse
from providers._stream_guard import guarded_stream
from providers.base import ResponseFormat
from providers.events import ProviderEvent, StartEvent
from providers.messages import ImageContent, TextContent, ToolResultMessage, Usage

ERROR_PREFIX = "Error: "
IMAGES_FOLLOW = "(images attached in the next message)"


class StreamParser:
    """One protocol's wire → provider-event mapping for one response (one subclass per protocol).

    The base holds what both protocols share: the ``usage`` reported so far (attached to the
    ``error`` of a broken stream) and the one ``start`` event.
    """

    def __init__(self, model: str) -> None:
        self.finished = False
        """True once ``done`` or ``error`` was produced."""
        self.usage = Usage()
        self._model = model
        self._started = False

    def feed(self, event: SSEEvent) -> list[ProviderEvent]:
        """Events for one SSE event (ending with ``done`` or ``error`` once the reply is over)."""
        raise NotImplementedError

    def end(self) -> list[ProviderEvent]:
        """Events for the end of the byte stream (``error`` when no terminal event came)."""
        raise NotImplementedError

    def _start(self, model: object) -> list[ProviderEvent]:
        """``[start]`` the first time (``model`` when the wire named one), then ``[]``."""
        if self._started:
            return []
        self._started = True
        return [StartEvent(model=model if isinstance(model, str) and model else self._model)]


class SSEParserDecoder:
    """The ``WireDecoder`` that runs a response's SSE events through a ``StreamParser``."""

    __slots__ = ("_parser",)

    def __init__(self, parser: StreamParser) -> None:
        self._parser = parser

    @property
    def usage(self) -> Usage:
        """The parser's usage so far."""
        return self._parser.usage

    async def events(self, response: httpx.Response) -> AsyncGenerator[ProviderEvent, None]:
        """The parser's events; ``guarded_stream`` stops reading at the terminal one."""
        feed = self._parser.feed
        async for sse in iter_sse(body_chunks(response)):
            for event in feed(sse):
                yield event
        for event in self._parser.end():
            yield event


@dataclass(frozen=True, slots=True)
class SSEEndpoint:
    """Where and how one OpenAI-style adapter POSTs; its ``stream`` is the adapter's ``stream``."""

    client: httpx.AsyncClient
    url: str
    api_key: str | None = field(repr=False)
    retry: RetryPolicy
    timeout: httpx.Timeout | None
    post: PreparedPost = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "post", PreparedPost(self.client, self.url,
                                                      auth_headers(self.api_key), self.timeout))

    def stream(self, label: str, model: str, body: Callable[[], Awaitable[object]],
               parser: StreamParser) -> AsyncIterator[ProviderEvent]:
        """POST ``await body()`` as JSON and stream the reply through ``parser``, never raising.

        The body is built (attachments fetched) and encoded inside the frame, so a request
        that cannot be built or encoded is an ``error`` event too.
        """
        async def build() -> httpx.Request:
            return self.post.build(orjson.dumps(await body()))

        return guarded_stream(label=label, model=model, client=self.client, build=build,
                              retry=self.retry, decoder=SSEParserDecoder(parser))


def auth_headers(api_key: str | None) -> dict[str, str]:
    """Request headers; ``Authorization`` only when there is a key (never logged)."""
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


def image_url(image: ImageContent) -> str:
    """An image's URL as both OpenAI protocols take it: its own, or its data as a ``data:``
    URL."""
    return image.url or f"data:{image.mime_type};base64,{image.data}"


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

def json_schema(fmt: ResponseFormat) -> dict[str, Any]:
    """A response format as OpenAI's ``{name, schema, strict, description?}`` (the Responses
    API's ``text.format`` is the same object with ``type`` beside it)."""
    spec: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema, "strict": fmt.strict}
    if fmt.description:
        spec["description"] = fmt.description
    return spec
