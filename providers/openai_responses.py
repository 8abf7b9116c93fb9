"""OpenAI Responses API adapter (``POST {base_url}/responses``, streamed, ``store: false``).

Request mapping lives in ``providers._openai_responses_wire``. Stream mapping, with each output
item's ``output_index`` as the ``content_index``:

- ``response.output_item.added``: ``message`` → text start, ``function_call`` → tool call start
  (``call_id`` and ``name`` are known here), ``reasoning`` → thinking start; other items
  (built-in tools) are ignored.
- ``response.output_text.delta`` / ``response.refusal.delta`` → text;
  ``response.reasoning_summary_text.delta`` (and ``response.reasoning_text.delta``, served by
  open-weight reasoning models) → thinking, summary parts separated by a blank line;
  ``response.function_call_arguments.delta`` → tool call arguments.
- ``response.output_item.done`` closes the block. Its signature is the item id for messages and
  function calls, and the whole reasoning item (JSON, with ``encrypted_content``) for reasoning,
  which is what ``_openai_responses_wire`` replays. Text or arguments that only arrive in the done
  item (no deltas) are emitted then.
- ``response.completed`` → done (``tool_use`` when the reply has function calls); usage
  ``input_tokens - cached_tokens`` / ``output_tokens`` / ``cached_tokens`` → cache_read.
  ``response.incomplete`` with ``max_output_tokens`` → done ``length``, any other reason → error.
  ``response.failed`` and ``error`` → error with the provider's message. A body that ends
  before any of these, or breaks, is a retryable error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import httpx
import orjson

from providers._http import RetryPolicy
from providers._openai_common import SSEEndpoint, StreamParser
from providers._openai_responses_wire import build_body
from providers._sse import SSEEvent
from providers.attachments import EVERYTHING, Accepts
from providers.base import ModelRequest
from providers.events import (
    DoneEvent,
    ErrorEvent,
    ProviderEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from providers.messages import Usage

_RETRYABLE_CODES = {"server_error", "rate_limit_exceeded", "overloaded", "internal_error"}
_REASONING_KEYS = ("type", "id", "summary", "encrypted_content")
_THINKING_DELTAS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")
_TEXT_DELTAS = ("response.output_text.delta", "response.refusal.delta")


class OpenAIResponsesProvider:
    """Streams a ``ModelRequest`` through the OpenAI Responses API (attachment URLs, images
    and files alike, are passed on: the API fetches them)."""

    accepts: Accepts = EVERYTHING

    def __init__(self, *, client: httpx.AsyncClient, base_url: str, api_key: str | None,
                 retry: RetryPolicy = RetryPolicy(),  # noqa: B008
                 name: str = "openai-responses", timeout: httpx.Timeout | None = None) -> None:
        self.name = name
        url = base_url.rstrip("/") + "/responses"
        self._endpoint = SSEEndpoint(client, url, api_key, retry, timeout)

    def __repr__(self) -> str:  # no key in logs
        return f"OpenAIResponsesProvider(name={self.name!r}, url={self._endpoint.url!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the reply to ``request`` (see the module doc for the mapping)."""
        async def body() -> dict[str, Any]:
            return build_body(request, provider=self.name)

        return self._endpoint.stream(self.name, request.model, body,
                                     ResponsesStreamParser(request.model))


class ResponsesStreamParser(StreamParser):
    """Maps Responses streaming events to provider events for one response."""

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self._open: dict[int, str] = {}  # output_index → "text" | "thinking" | "call"
        self._filled: set[int] = set()  # blocks that received at least one delta
        self._summary: dict[int, int] = {}  # reasoning output_index → last summary_index
        self._calls = 0

    def feed(self, event: SSEEvent) -> list[ProviderEvent]:
        """Events for one SSE event (the JSON ``type`` field decides, not the SSE name)."""
        if not event.data.strip() or event.data.strip() == "[DONE]":
            return []
        data: Any = orjson.loads(event.data)
        if not isinstance(data, dict):
            return []
        kind = str(data.get("type", event.event))
        response = data.get("response")
        if not isinstance(response, dict):
            response = {}
        out = self._start(response.get("model"))
        return out + self._dispatch(kind, data, response)

    def end(self) -> list[ProviderEvent]:
        """The body ended without a terminal event: a retryable error."""
        if self.finished:
            return []
        return self.fail("stream ended before response.completed", retryable=True)

    def fail(self, message: str, *, retryable: bool, usage: Usage | None = None
             ) -> list[ProviderEvent]:
        """``start`` (if not sent yet), open blocks closed, and an ``error``."""
        self.finished = True
        error = ErrorEvent(stop_reason="error", error_message=message, retryable=retryable,
                           usage=usage or Usage())
        return [*self._start(None), error]

    def _dispatch(self, kind: str, data: dict[str, Any],
                  response: dict[str, Any]) -> list[ProviderEvent]:
        index = int(data.get("output_index", 0))
        if kind == "response.output_item.added":
            return self._added(index, data.get("item") or {})
        if kind in _TEXT_DELTAS:
            self._filled.add(index)
            return [TextDelta(index, str(data.get("delta", "")))]
        if kind in _THINKING_DELTAS:
            return self._thinking_delta(index, data)
        if kind == "response.function_call_arguments.delta":
            self._filled.add(index)
            return [ToolCallDelta(index, str(data.get("delta", "")))]
        if kind == "response.output_item.done":
            return self._done_item(index, data.get("item") or {})
        return self._terminal(kind, data, response)

    def _added(self, index: int, item: dict[str, Any]) -> list[ProviderEvent]:
        kind = item.get("type")
        if kind == "message":
            self._open[index] = "text"
            return [TextStart(index)]
        if kind == "reasoning":
            self._open[index] = "thinking"
            return [ThinkingStart(index)]
        if kind == "function_call":
            self._open[index] = "call"
            self._calls += 1
            return [ToolCallStart(index, str(item.get("call_id", "")), str(item.get("name", "")))]
        return []

    def _thinking_delta(self, index: int, data: dict[str, Any]) -> list[ProviderEvent]:
        part = int(data.get("summary_index", 0))
        gap = "\n\n" if index in self._summary and self._summary[index] != part else ""
        self._summary[index] = part
        self._filled.add(index)
        return [ThinkingDelta(index, gap + str(data.get("delta", "")))]

    def _done_item(self, index: int, item: dict[str, Any]) -> list[ProviderEvent]:
        kind = self._open.pop(index, None)
        late = index not in self._filled
        if kind == "text":
            text = "".join(str(p.get("text") or p.get("refusal") or "")
                           for p in item.get("content") or [])
            head: list[ProviderEvent] = [TextDelta(index, text)] if late and text else []
            return [*head, TextEnd(index, signature=item.get("id"))]
        if kind == "thinking":
            summary = "\n\n".join(str(p.get("text", "")) for p in item.get("summary") or [])
            head = [ThinkingDelta(index, summary)] if late and summary else []
            replay = {k: item[k] for k in _REASONING_KEYS if k in item}
            return [*head, ThinkingEnd(index, signature=orjson.dumps(replay).decode())]
        if kind == "call":
            args = str(item.get("arguments") or "")
            head = [ToolCallDelta(index, args)] if late and args else []
            return [*head, ToolCallEnd(index, id=item.get("call_id"), name=item.get("name"),
                                       signature=item.get("id"))]
        return []

    def _terminal(self, kind: str, data: dict[str, Any],
                  response: dict[str, Any]) -> list[ProviderEvent]:
        usage = _usage(response.get("usage"))
        if kind == "response.completed":
            return self._finish("tool_use" if self._calls else "stop", usage)
        if kind == "response.incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason")
            if reason == "max_output_tokens":
                return self._finish("length", usage)
            return self._close_open() + self.fail(
                f"response incomplete: {reason}", retryable=False, usage=usage)
        if kind in ("response.failed", "error"):
            error = response.get("error") or data.get("error") or data
            message = str(error.get("message") or "response failed")
            retryable = str(error.get("code")) in _RETRYABLE_CODES
            return self._close_open() + self.fail(message, retryable=retryable, usage=usage)
        return []  # response.created, content_part.*, *.done text events … carry nothing new

    def _finish(self, reason: Literal["stop", "length", "tool_use"], usage: Usage
                ) -> list[ProviderEvent]:
        out = self._close_open()
        self.finished = True
        return [*out, DoneEvent(stop_reason=reason, usage=usage)]

    def _close_open(self) -> list[ProviderEvent]:
        ends = {"text": TextEnd, "thinking": ThinkingEnd, "call": ToolCallEnd}
        out: list[ProviderEvent] = [ends[kind](index) for index, kind in sorted(self._open.items())]
        self._open.clear()
        return out


def _usage(wire: object) -> Usage:
    if not isinstance(wire, dict):
        return Usage()
    prompt = int(wire.get("input_tokens") or 0)
    output = int(wire.get("output_tokens") or 0)
    details = wire.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return Usage(input_tokens=prompt - cached, output_tokens=output, cache_read_tokens=cached,
                 total_tokens=int(wire.get("total_tokens") or prompt + output))
