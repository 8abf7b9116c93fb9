"""Bedrock ConverseStream event-stream frames → provider events.

Event frames (docs.aws.amazon.com, ``ConverseStreamOutput``) carry ``:event-type`` and a JSON
payload: ``messageStart``, ``contentBlockStart`` (only tool uses announce themselves),
``contentBlockDelta`` (``text``, ``toolUse.input`` JSON fragments, ``reasoningContent`` text,
signature or ``redactedContent``), ``contentBlockStop``, ``messageStop`` (``stopReason``) and a
last ``metadata`` (usage). ``done`` is sent when the body ends after ``messageStop``.
``:message-type`` ``exception``/``error`` frames become ``error`` events (throttling and
unavailability are retryable); a frame with a bad CRC is a retryable ``error``.
A redacted reasoning block's ``redactedContent`` travels as the thinking block's ``signature``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Literal

import httpx
import orjson

from providers._eventstream import EventStreamCorrupt, EventStreamTruncated, iter_frames
from providers._http import body_chunks
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

_STOP_REASONS: dict[str, Literal["stop", "length", "tool_use"]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
}
_ERROR_STOPS = frozenset({"guardrail_intervened", "content_filtered"})
_RETRYABLE_EXCEPTIONS = frozenset({
    "throttlingException", "serviceUnavailableException", "internalServerException",
    "modelStreamErrorException", "modelNotReadyException",
})


class BedrockDecoder:
    """One stream's state: block kinds by index, pending signatures, usage, stop reason."""

    def __init__(self) -> None:
        self.usage = Usage()
        self._kinds: dict[int, str] = {}
        self._signatures: dict[int, str] = {}
        self._stop_reason: str | None = None

    async def events(self, response: httpx.Response) -> AsyncGenerator[ProviderEvent, None]:
        """The events of one streamed reply."""
        try:
            async for frame in iter_frames(body_chunks(response)):
                for event in self.on_frame(frame.headers, frame.payload):
                    yield event
        except EventStreamCorrupt as exc:
            yield ErrorEvent("error", f"bedrock: corrupt event stream frame ({exc})",
                             usage=self.usage, retryable=True)
            return
        except EventStreamTruncated as exc:
            yield ErrorEvent("error", f"bedrock: {exc}", usage=self.usage, retryable=True)
            return
        if self._stop_reason is not None:
            yield self._finish()

    def on_frame(self, headers: dict[str, Any], payload: bytes) -> list[ProviderEvent]:
        """Translate one frame."""
        message_type = headers.get(":message-type", "event")
        if message_type == "exception":
            return [self._exception(str(headers.get(":exception-type", "exception")), payload)]
        if message_type == "error":
            code, text = headers.get(":error-code", "error"), headers.get(":error-message", "")
            return [ErrorEvent("error", f"bedrock: {code}: {text}", usage=self.usage)]
        data: dict[str, Any] = orjson.loads(payload) if payload else {}
        kind = headers.get(":event-type")
        if kind == "contentBlockDelta":
            return self._delta(data.get("contentBlockIndex", 0), data.get("delta") or {})
        if kind == "contentBlockStart":
            return self._start(data.get("contentBlockIndex", 0), data.get("start") or {})
        if kind == "contentBlockStop":
            return self._stop(data.get("contentBlockIndex", 0))
        if kind == "messageStop":
            self._stop_reason = data.get("stopReason") or "end_turn"
        elif kind == "metadata":
            self._read_usage(data.get("usage") or {})
        return []  # messageStart: the guard sends ``start``

    def _start(self, index: int, start: dict[str, Any]) -> list[ProviderEvent]:
        tool = start.get("toolUse")
        if not tool:
            return []
        self._kinds[index] = "tool"
        return [ToolCallStart(index, tool.get("toolUseId", ""), tool.get("name", ""))]

    def _delta(self, index: int, delta: dict[str, Any]) -> list[ProviderEvent]:
        if "text" in delta:
            return [*self._open(index, "text"), TextDelta(index, delta["text"])]
        if "toolUse" in delta:
            fragment = delta["toolUse"].get("input", "")
            return [ToolCallDelta(index, fragment)] if fragment else []
        reasoning = delta.get("reasoningContent")
        if not reasoning:
            return []  # citations and other deltas
        if "redactedContent" in reasoning:
            self._signatures[index] = reasoning["redactedContent"]
            return self._open(index, "redacted")
        out = self._open(index, "thinking")
        if reasoning.get("signature"):
            self._signatures[index] = self._signatures.get(index, "") + reasoning["signature"]
        if reasoning.get("text"):
            out.append(ThinkingDelta(index, reasoning["text"]))
        return out

    def _open(self, index: int, kind: str) -> list[ProviderEvent]:
        if index in self._kinds:
            return []
        self._kinds[index] = kind
        if kind == "text":
            return [TextStart(index)]
        return [ThinkingStart(index, redacted=kind == "redacted")]

    def _stop(self, index: int) -> list[ProviderEvent]:
        kind = self._kinds.pop(index, "")
        signature = self._signatures.pop(index, None)
        if kind == "text":
            return [TextEnd(index)]
        if kind == "tool":
            return [ToolCallEnd(index)]
        return [ThinkingEnd(index, signature=signature)] if kind else []

    def _read_usage(self, raw: dict[str, Any]) -> None:
        usage = self.usage
        usage.input_tokens = raw.get("inputTokens", 0)
        usage.output_tokens = raw.get("outputTokens", 0)
        usage.cache_read_tokens = raw.get("cacheReadInputTokens", 0)
        usage.cache_write_tokens = raw.get("cacheWriteInputTokens", 0)
        usage.total_tokens = raw.get("totalTokens") or (
            usage.input_tokens + usage.output_tokens + usage.cache_read_tokens
            + usage.cache_write_tokens)

    def _finish(self) -> ProviderEvent:
        reason = self._stop_reason or "end_turn"
        if reason in _ERROR_STOPS:
            return ErrorEvent("error", f"bedrock: the model stopped with {reason}",
                              usage=self.usage)
        return DoneEvent(_STOP_REASONS.get(reason, "stop"), usage=self.usage)

    def _exception(self, kind: str, payload: bytes) -> ErrorEvent:
        try:
            message = str(orjson.loads(payload).get("message", "")) if payload else ""
        except (orjson.JSONDecodeError, AttributeError):
            message = payload.decode("utf-8", "replace")
        return ErrorEvent("error", f"bedrock: {kind}: {message}", usage=self.usage,
                          retryable=kind in _RETRYABLE_EXCEPTIONS)
