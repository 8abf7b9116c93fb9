"""OpenAI Chat Completions adapter (``POST {base_url}/chat/completions``, streamed).

Works with OpenAI and the servers that copy its protocol (vLLM, Ollama, Groq, OpenRouter …).
Request mapping lives in ``providers._openai_wire``; this module reads the stream:

- ``choices[0].delta.content`` → text; ``reasoning_content`` or ``reasoning`` (served by
  vLLM, DeepSeek, Ollama, OpenRouter) → thinking. One chunk may carry text and tool calls.
- ``delta.tool_calls[]`` are keyed by ``index``; ``id`` and ``function.name`` may arrive in a
  later chunk than the first fragment, so a call's ``toolcall_start`` waits for its name and its
  ``toolcall_end`` carries the final id and name. Calls stay open until the finish.
- ``finish_reason``: ``stop``→stop, ``length``→length, ``tool_calls``/``function_call``→tool_use
  (also when a server says ``stop`` after sending tool calls), ``content_filter``→error.
- ``usage`` (sent in a last chunk with empty ``choices`` thanks to ``include_usage``):
  ``input_tokens = prompt_tokens - cached_tokens``, ``cache_read_tokens = cached_tokens``.
- ``done`` is sent at ``data: [DONE]`` (or at the end of the body once a finish reason came);
  a body that ends with no finish reason, or breaks, is a retryable ``error``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import httpx
import orjson

from providers._http import RetryPolicy
from providers._openai_common import SSEEndpoint, StreamParser
from providers._openai_wire import DeltaToolCall, build_body
from providers._sse import SSEEvent
from providers.attachment_fetch import AttachmentFetcher
from providers.attachments import PDF, TEXT_TYPES, Accepts, inline_urls
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
from providers.messages import Attachment, ImageContent, Usage

_StopReason: TypeAlias = Literal["stop", "length", "tool_use"]
_STOP: dict[str, _StopReason] = {
    "stop": "stop", "length": "length", "tool_calls": "tool_use", "function_call": "tool_use"}
_RETRYABLE_ERRORS = {"server_error", "rate_limit_exceeded", "overloaded_error", "timeout"}
OPENAI_ACCEPTS = Accepts(images=True, urls=True, documents=frozenset({PDF}) | TEXT_TYPES)
"""OpenAI's own Chat Completions: image URLs passed on, PDFs as files, text as text parts."""
COMPATIBLE_ACCEPTS = Accepts(images=True, urls=True, documents=TEXT_TYPES)
"""A compatible server (vLLM, Ollama, …): image URLs fetched and sent as data, no PDFs."""


class OpenAIChatProvider:
    """Streams a ``ModelRequest`` through an OpenAI-compatible ``/chat/completions`` endpoint.

    ``compatible``: the server copies OpenAI's protocol (vLLM, Ollama, …) without its file
    inputs, so image URLs are fetched and sent as ``data:`` URLs and PDFs are not taken."""

    def __init__(self, *, client: httpx.AsyncClient, base_url: str, api_key: str | None,
                 retry: RetryPolicy = RetryPolicy(), name: str = "openai",  # noqa: B008
                 max_tokens_field: str = "max_completion_tokens",
                 timeout: httpx.Timeout | None = None, compatible: bool = False,
                 fetcher: AttachmentFetcher | None = None) -> None:
        self.name = name
        url = base_url.rstrip("/") + "/chat/completions"
        self._endpoint = SSEEndpoint(client, url, api_key, retry, timeout)
        self._max_tokens_field = max_tokens_field
        self._compatible = compatible
        self.accepts = COMPATIBLE_ACCEPTS if compatible else OPENAI_ACCEPTS
        self._fetcher = fetcher or AttachmentFetcher()

    def __repr__(self) -> str:  # no key in logs
        return f"OpenAIChatProvider(name={self.name!r}, url={self._endpoint.url!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the reply to ``request`` (see the module doc for the mapping)."""
        async def body() -> dict[str, Any]:
            messages = await inline_urls(request.messages, self._fetcher.inline, self._passes)
            return build_body(dataclasses.replace(request, messages=messages),
                              max_tokens_field=self._max_tokens_field,
                              pdf=not self._compatible)

        return self._endpoint.stream(self.name, request.model, body,
                                     ChatStreamParser(request.model))

    def _passes(self, block: Attachment) -> bool:
        """Whether the block's URL goes to the server as is: OpenAI's own image URLs."""
        return isinstance(block, ImageContent) and not self._compatible


@dataclass(slots=True)
class _Call:
    content_index: int
    id: str = ""
    name: str = ""
    started: bool = False
    pending: list[str] = field(default_factory=list)
    """Argument fragments that came before the name (sent once ``toolcall_start`` is)."""


class ChatStreamParser(StreamParser):
    """Maps Chat Completions chunks to provider events for one response."""

    def __init__(self, model: str) -> None:
        super().__init__(model)
        self._next = 0
        self._text: int | None = None
        self._thinking: int | None = None
        self._calls: dict[int, _Call] = {}
        self._finish: str | None = None

    def feed(self, event: SSEEvent) -> list[ProviderEvent]:
        """Events for one ``data:`` line."""
        data = event.data.strip()
        if not data:
            return []
        if data == "[DONE]":
            return self._end()
        chunk: Any = orjson.loads(data)
        if not isinstance(chunk, dict):
            return []
        out = [] if self._started else self._start(chunk.get("model"))
        if chunk.get("error"):
            return out + self._wire_error(chunk["error"])
        if isinstance(chunk.get("usage"), dict):
            self.usage = _usage(chunk["usage"])
        choices = chunk.get("choices") or []
        if choices and isinstance(choices[0], dict):
            out += self._choice(choices[0])
        return out

    def end(self) -> list[ProviderEvent]:
        """The body ended: ``done`` if a finish reason came, else a retryable ``error``."""
        return [] if self.finished else self._end()

    def fail(self, message: str, *, retryable: bool) -> list[ProviderEvent]:
        """``start`` (if not sent yet) and an ``error``."""
        self.finished = True
        error = ErrorEvent(stop_reason="error", error_message=message, retryable=retryable,
                           usage=self.usage)
        return [*self._start(None), error]

    def _choice(self, choice: dict[str, Any]) -> list[ProviderEvent]:
        delta = choice.get("delta")
        out: list[ProviderEvent] = []
        if delta:  # each key read once: this runs per streamed frame
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and isinstance(reasoning, str):
                out += self._thinking_delta(reasoning)
            content = delta.get("content")
            if content and isinstance(content, str):
                out += self._text_delta(content)
            refusal = delta.get("refusal")
            if refusal and isinstance(refusal, str):
                out += self._text_delta(refusal)
            for call in delta.get("tool_calls") or []:
                out += self._call_delta(call)
        finish = choice.get("finish_reason")
        if finish:
            self._finish = str(finish)
        return out

    def _open(self) -> int:
        self._next += 1
        return self._next - 1

    def _thinking_delta(self, text: str) -> list[ProviderEvent]:
        out = self._close_text()
        if self._thinking is None:
            self._thinking = self._open()
            out.append(ThinkingStart(self._thinking))
        out.append(ThinkingDelta(self._thinking, text))
        return out

    def _text_delta(self, text: str) -> list[ProviderEvent]:
        out = [] if self._thinking is None else self._close_thinking()
        if self._text is None:
            self._text = self._open()
            out.append(TextStart(self._text))
        out.append(TextDelta(self._text, text))
        return out

    def _call_delta(self, wire: DeltaToolCall) -> list[ProviderEvent]:
        out = self._close_thinking() + self._close_text()
        index = wire.get("index", len(self._calls))
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _Call(self._open())
        function = wire.get("function") or {}
        call.id = call.id or wire.get("id") or ""
        call.name = call.name or function.get("name") or ""
        if function.get("arguments"):
            call.pending.append(str(function["arguments"]))
        if call.name:
            out += self._flush_call(call)
        return out

    def _flush_call(self, call: _Call) -> list[ProviderEvent]:
        out: list[ProviderEvent] = []
        if not call.started:
            call.started = True
            out.append(ToolCallStart(call.content_index, call.id, call.name))
        out += [ToolCallDelta(call.content_index, d) for d in call.pending]
        call.pending.clear()
        return out

    def _close_text(self) -> list[ProviderEvent]:
        index, self._text = self._text, None
        return [] if index is None else [TextEnd(index)]

    def _close_thinking(self) -> list[ProviderEvent]:
        index, self._thinking = self._thinking, None
        return [] if index is None else [ThinkingEnd(index)]

    def _close_calls(self) -> list[ProviderEvent]:
        out: list[ProviderEvent] = []
        for call in sorted(self._calls.values(), key=lambda c: c.content_index):
            out += self._flush_call(call)
            call.id = call.id or f"call_{uuid.uuid4().hex[:24]}"
            out.append(ToolCallEnd(call.content_index, id=call.id, name=call.name))
        self._calls.clear()
        return out

    def _end(self) -> list[ProviderEvent]:
        if self._finish is None:
            return self.fail("stream ended before a finish_reason", retryable=True)
        out = self._start(None) + self._close_thinking() + self._close_text()
        had_calls = bool(self._calls)
        out += self._close_calls()
        self.finished = True
        if self._finish == "content_filter":
            message = "the provider's content filter stopped the reply"
            return [*out, ErrorEvent(stop_reason="error", error_message=message,
                                     usage=self.usage)]
        reason = _STOP.get(self._finish, "stop")
        if reason == "stop" and had_calls:
            reason = "tool_use"
        return [*out, DoneEvent(stop_reason=reason, usage=self.usage)]

    def _wire_error(self, error: object) -> list[ProviderEvent]:
        if not isinstance(error, dict):
            return self.fail(str(error), retryable=False)
        message = str(error.get("message") or error)
        kind = {str(error.get("type")), str(error.get("code"))}
        retryable = bool(kind & _RETRYABLE_ERRORS) or "overloaded" in message.lower()
        return self.fail(message, retryable=retryable)


def _usage(wire: dict[str, Any]) -> Usage:
    prompt = int(wire.get("prompt_tokens") or 0)
    output = int(wire.get("completion_tokens") or 0)
    details = wire.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    total = int(wire.get("total_tokens") or prompt + output)
    return Usage(input_tokens=prompt - cached, output_tokens=output, cache_read_tokens=cached,
                 total_tokens=total)
