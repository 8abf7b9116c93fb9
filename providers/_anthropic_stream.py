"""Anthropic Messages SSE → provider events.

Wire events (docs.anthropic.com, "Streaming Messages"): ``message_start`` (model, input usage),
``content_block_start``/``_delta``/``_stop`` per block ``index``, ``message_delta`` (stop reason,
cumulative output usage), ``message_stop``, ``ping`` and ``error``. The block ``index`` is used
as the ``content_index`` unchanged. A ``redacted_thinking`` block's ``data`` is its replay token:
it travels as the thinking block's ``signature``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Literal

import httpx
import orjson

from providers._http import body_chunks
from providers._sse import iter_sse
from providers.events import (
    DoneEvent,
    ErrorEvent,
    ProviderEvent,
    StartEvent,
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

_STOP_REASONS: dict[str, Literal["stop", "length", "tool_use"]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
}
_ERROR_STOPS = frozenset({"refusal"})
# error types worth sending again (docs "Errors": 429 rate_limit, 500 api, 529 overloaded)
_RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


class AnthropicDecoder:
    """One stream's state: block kinds by index, pending signatures, usage, stop reason."""

    def __init__(self) -> None:
        self.usage = Usage()
        self._kinds: dict[int, str] = {}
        self._signatures: dict[int, str] = {}
        self._stop_reason = "end_turn"

    async def events(self, response: httpx.Response) -> AsyncGenerator[ProviderEvent, None]:
        """The events of one streamed reply."""
        async for sse in iter_sse(body_chunks(response)):
            if sse.data:
                for event in self.on_event(orjson.loads(sse.data)):
                    yield event

    def on_event(self, data: dict[str, Any]) -> list[ProviderEvent]:
        """Translate one decoded SSE ``data`` object."""
        kind = data.get("type")
        if kind == "content_block_delta":
            return self._delta(data["index"], data["delta"])
        if kind == "content_block_start":
            return self._start(data["index"], data["content_block"])
        if kind == "content_block_stop":
            return self._stop(data["index"])
        if kind == "message_start":
            message = data.get("message", {})
            self._read_usage(message.get("usage") or {})
            return [StartEvent(model=message.get("model", ""))]
        if kind == "message_delta":
            self._stop_reason = data.get("delta", {}).get("stop_reason") or self._stop_reason
            self._read_usage(data.get("usage") or {})
            return []
        if kind == "message_stop":
            return [self._finish()]
        if kind == "error":
            return [self._error(data.get("error") or {})]
        return []  # ping, and event types added after this was written

    def _start(self, index: int, block: dict[str, Any]) -> list[ProviderEvent]:
        kind = block.get("type", "")
        self._kinds[index] = kind
        if kind == "text":
            text = block.get("text", "")
            return [TextStart(index), *([TextDelta(index, text)] if text else [])]
        if kind == "thinking":
            if block.get("signature"):
                self._signatures[index] = block["signature"]
            thinking = block.get("thinking", "")
            return [ThinkingStart(index), *([ThinkingDelta(index, thinking)] if thinking else [])]
        if kind == "redacted_thinking":
            self._signatures[index] = block.get("data", "")
            return [ThinkingStart(index, redacted=True)]
        if kind == "tool_use":
            args = block.get("input") or {}
            start = ToolCallStart(index, block["id"], block["name"])
            return [start, *([ToolCallDelta(index, orjson.dumps(args).decode())] if args else [])]
        return []  # server tools and other block kinds are not part of the neutral model

    def _delta(self, index: int, delta: dict[str, Any]) -> list[ProviderEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            return [TextDelta(index, delta["text"])]
        if kind == "input_json_delta":
            return [ToolCallDelta(index, delta["partial_json"])] if delta["partial_json"] else []
        if kind == "thinking_delta":
            return [ThinkingDelta(index, delta["thinking"])]
        if kind == "signature_delta":
            self._signatures[index] = self._signatures.get(index, "") + delta["signature"]
        return []  # citations_delta and the like

    def _stop(self, index: int) -> list[ProviderEvent]:
        kind = self._kinds.pop(index, "")
        signature = self._signatures.pop(index, None)
        if kind == "text":
            return [TextEnd(index)]
        if kind in ("thinking", "redacted_thinking"):
            return [ThinkingEnd(index, signature=signature)]
        if kind == "tool_use":
            return [ToolCallEnd(index)]
        return []

    def _read_usage(self, raw: dict[str, Any]) -> None:
        usage = self.usage
        usage.input_tokens = raw.get("input_tokens") or usage.input_tokens
        usage.output_tokens = raw.get("output_tokens") or usage.output_tokens
        usage.cache_read_tokens = raw.get("cache_read_input_tokens") or usage.cache_read_tokens
        usage.cache_write_tokens = (raw.get("cache_creation_input_tokens")
                                    or usage.cache_write_tokens)
        usage.total_tokens = (usage.input_tokens + usage.output_tokens
                              + usage.cache_read_tokens + usage.cache_write_tokens)

    def _finish(self) -> ProviderEvent:
        if self._stop_reason in _ERROR_STOPS:
            return ErrorEvent("error", f"anthropic: the model stopped with {self._stop_reason}",
                              usage=self.usage)
        return DoneEvent(_STOP_REASONS.get(self._stop_reason, "stop"), usage=self.usage)

    def _error(self, error: dict[str, Any]) -> ErrorEvent:
        kind = str(error.get("type", "error"))
        message = str(error.get("message", "stream error"))
        return ErrorEvent("error", f"anthropic: {kind}: {message}", usage=self.usage,
                          retryable=kind in _RETRYABLE_ERRORS)
