"""Gemini ``streamGenerateContent?alt=sse`` → provider events.

Every SSE ``data`` is a whole ``GenerateContentResponse`` (ai.google.dev, "Generating content"):
``candidates[0].content.parts`` plus, on the last chunks, ``finishReason`` and
``usageMetadata``. Gemini has no end-of-stream marker, so ``done`` is sent when the body ends
after a ``finishReason``.

- Consecutive ``text`` parts extend one text block; ``thought: true`` parts one thinking block.
  A part carrying a ``thoughtSignature`` closes its block with that signature, so the signature
  is replayed on the same part it came with.
- Each ``functionCall`` part arrives whole: ``toolcall_start`` + one ``toolcall_delta`` (the args
  as JSON) + ``toolcall_end`` (with its ``thoughtSignature``). A call without an ``id`` gets
  ``call_{responseId}_{n}`` (a random stem when the response has no id).
- ``finishReason``: STOP→stop (tool_use when the reply called functions), MAX_TOKENS→length,
  anything else (SAFETY, RECITATION, MALFORMED_FUNCTION_CALL …)→error.
- ``usageMetadata``: ``input = promptTokenCount - cachedContentTokenCount``,
  ``cache_read = cachedContentTokenCount``, ``output = candidatesTokenCount +
  thoughtsTokenCount`` (thinking is billed as output), ``total = totalTokenCount``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from typing import Any

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

# google.rpc codes / statuses worth sending again
_RETRYABLE_CODES = frozenset({429, 500, 503, 504})
_RETRYABLE_STATUSES = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL",
                                 "DEADLINE_EXCEEDED"})


class GeminiDecoder:
    """One stream's state: the open block, block counter, calls made, finish reason, usage."""

    def __init__(self) -> None:
        self.usage = Usage()
        self._started = False
        self._open: str | None = None  # "text" | "thinking"
        self._index = -1
        self._calls = 0
        self._id_stem = ""
        self._finish: str | None = None
        self._finish_message = ""

    async def events(self, response: httpx.Response) -> AsyncGenerator[ProviderEvent, None]:
        """The events of one streamed reply."""
        async for sse in iter_sse(body_chunks(response)):
            if sse.data:
                for event in self.on_chunk(orjson.loads(sse.data)):
                    yield event
        for event in self.on_end():
            yield event

    def on_chunk(self, data: dict[str, Any]) -> list[ProviderEvent]:
        """Translate one ``GenerateContentResponse`` chunk."""
        out: list[ProviderEvent] = []
        if not self._started:
            self._started = True
            self._id_stem = data.get("responseId") or uuid.uuid4().hex[:16]
            out.append(StartEvent(model=data.get("modelVersion", "")))
        if "error" in data:
            return [*out, *self._close(None), self._error(data["error"])]
        self._read_usage(data.get("usageMetadata") or {})
        candidates = data.get("candidates") or []
        if not candidates:
            blocked = (data.get("promptFeedback") or {}).get("blockReason")
            if blocked:
                self._finish, self._finish_message = "PROMPT_BLOCKED", str(blocked)
            return out
        candidate = candidates[0]
        for part in (candidate.get("content") or {}).get("parts") or []:
            out += self._part(part)
        if candidate.get("finishReason"):
            self._finish = candidate["finishReason"]
            self._finish_message = candidate.get("finishMessage", "")
        return out

    def on_end(self) -> list[ProviderEvent]:
        """The body ended: close the open block and finish (nothing when no finish came)."""
        out = self._close(None)
        if self._finish is None:
            return out
        if self._finish == "STOP":
            return [*out, DoneEvent("tool_use" if self._calls else "stop", usage=self.usage)]
        if self._finish == "MAX_TOKENS":
            return [*out, DoneEvent("length", usage=self.usage)]
        detail = f": {self._finish_message}" if self._finish_message else ""
        return [*out, ErrorEvent("error", f"gemini: the model stopped with {self._finish}{detail}",
                                 usage=self.usage)]

    def _part(self, part: dict[str, Any]) -> list[ProviderEvent]:
        signature = part.get("thoughtSignature")
        if "functionCall" in part:
            return [*self._close(None), *self._call(part["functionCall"], signature)]
        if "text" not in part and signature is None:
            return []  # inlineData, executableCode … are not part of the neutral model
        kind = "thinking" if part.get("thought") else "text"
        out = self._close(None) if self._open != kind else []
        if self._open is None:
            self._open, self._index = kind, self._index + 1
            out.append(TextStart(self._index) if kind == "text" else ThinkingStart(self._index))
        text = part.get("text", "")
        if text:
            out.append(TextDelta(self._index, text) if kind == "text"
                       else ThinkingDelta(self._index, text))
        return out + (self._close(signature) if signature else [])

    def _call(self, call: dict[str, Any], signature: str | None) -> list[ProviderEvent]:
        self._index += 1
        self._calls += 1
        call_id = call.get("id") or f"call_{self._id_stem}_{self._calls}"
        args = orjson.dumps(call.get("args") or {}).decode()
        return [ToolCallStart(self._index, call_id, call.get("name", "")),
                ToolCallDelta(self._index, args),
                ToolCallEnd(self._index, signature=signature)]

    def _close(self, signature: str | None) -> list[ProviderEvent]:
        kind, self._open = self._open, None
        if kind == "text":
            return [TextEnd(self._index, signature=signature)]
        if kind == "thinking":
            return [ThinkingEnd(self._index, signature=signature)]
        return []

    def _read_usage(self, raw: dict[str, Any]) -> None:
        if not raw:
            return
        cached = raw.get("cachedContentTokenCount", 0)
        usage = self.usage
        usage.input_tokens = raw.get("promptTokenCount", 0) - cached
        usage.cache_read_tokens = cached
        usage.output_tokens = raw.get("candidatesTokenCount", 0) + raw.get("thoughtsTokenCount", 0)
        usage.total_tokens = raw.get("totalTokenCount") or (
            usage.input_tokens + usage.cache_read_tokens + usage.output_tokens)

    def _error(self, error: dict[str, Any]) -> ErrorEvent:
        code, status = error.get("code"), str(error.get("status", ""))
        message = str(error.get("message", "stream error"))
        return ErrorEvent("error", f"gemini: {status or code}: {message}", usage=self.usage,
                          retryable=code in _RETRYABLE_CODES or status in _RETRYABLE_STATUSES)
