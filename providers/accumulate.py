"""The only code that merges provider events into an ``AssistantMessage``.

``Accumulator.apply`` takes each event in stream order and returns nothing; the message under
construction is ``Accumulator.message``. Tool-call arguments are re-parsed on every delta so that
the partial message (and the loop's ``toolcall_delta`` event) always carries the best arguments
known so far.
"""

from __future__ import annotations

from typing import TypeVar, assert_never

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
from providers.messages import AssistantMessage, TextContent, ThinkingContent, ToolCall, Usage
from providers.partial_json import parse_complete_object, parse_partial_object

_B = TypeVar("_B", TextContent, ThinkingContent, ToolCall)


class Accumulator:
    """Builds one assistant message from one provider stream."""

    __slots__ = ("_args_text", "_blocks", "finished", "invalid_args", "message")

    def __init__(self, provider: str, model: str) -> None:
        self.message = AssistantMessage(provider=provider, model=model)
        self.finished = False
        self.invalid_args: dict[str, str] = {}
        """Tool-call id → why its final arguments text was not a JSON object."""
        # content_index (the provider's) → position in message.content
        self._blocks: dict[int, int] = {}
        self._args_text: dict[int, str] = {}

    def apply(self, event: ProviderEvent) -> None:
        """Merge one event into the message."""
        msg = self.message
        match event:
            case TextDelta(content_index=i, delta=d):
                self._block(i, TextContent).text += d
            case ThinkingDelta(content_index=i, delta=d):
                self._block(i, ThinkingContent).thinking += d
            case ToolCallDelta(content_index=i, delta=d):
                call = self._block(i, ToolCall)
                text = self._args_text.get(i, "") + d
                self._args_text[i] = text
                call.arguments = parse_partial_object(text)
            case TextStart(content_index=i):
                self._open(i, TextContent(text=""))
            case ThinkingStart(content_index=i, redacted=r):
                self._open(i, ThinkingContent(thinking="", redacted=r))
            case ToolCallStart(content_index=i, id=call_id, name=name):
                self._open(i, ToolCall(id=call_id, name=name))
                self._args_text[i] = ""
            case TextEnd(content_index=i, signature=s):
                if s is not None:
                    self._block(i, TextContent).signature = s
            case ThinkingEnd(content_index=i, signature=s):
                if s is not None:
                    self._block(i, ThinkingContent).signature = s
            case ToolCallEnd():
                self._close_call(event)
            case StartEvent(model=m):
                if m:
                    msg.model = m
            case DoneEvent(stop_reason=r, usage=u):
                self._finish(r, u, None)
            case ErrorEvent(stop_reason=r, usage=u, error_message=e):
                self._finish(r, u, e)
            case _:
                assert_never(event)

    def position(self, content_index: int) -> int:
        """Where the provider's block ``content_index`` sits in ``message.content``."""
        return self._blocks[content_index]

    def abort(self, reason: str = "aborted") -> AssistantMessage:
        """End the message as ``aborted`` (the consumer cancelled the stream)."""
        if not self.finished:
            self._finish("aborted", None, reason)
        return self.message

    def fail(self, error: str) -> AssistantMessage:
        """End the message as ``error`` (the stream ended without ``done``/``error``, or raised)."""
        if not self.finished:
            self._finish("error", None, error)
        return self.message

    def _open(self, index: int, block: TextContent | ThinkingContent | ToolCall) -> None:
        self._blocks[index] = len(self.message.content)
        self.message.content.append(block)

    def _block(self, index: int, kind: type[_B]) -> _B:
        pos = self._blocks.get(index)
        if pos is None:  # a delta without its start: open the block implicitly
            fresh: TextContent | ThinkingContent | ToolCall
            if kind is ToolCall:
                fresh = ToolCall(id=f"call_{index}", name="")
                self._args_text[index] = ""
            elif kind is TextContent:
                fresh = TextContent(text="")
            else:
                fresh = ThinkingContent(thinking="")
            self._open(index, fresh)
            pos = self._blocks[index]
        block = self.message.content[pos]
        if not isinstance(block, kind):
            raise ValueError(f"content_index {index} is a {block.type}, not a {kind.__name__}")
        return block

    def _close_call(self, event: ToolCallEnd) -> None:
        call = self._block(event.content_index, ToolCall)
        if event.id:
            call.id = event.id
        if event.name:
            call.name = event.name
        if event.signature is not None:
            call.signature = event.signature
        args, error = parse_complete_object(self._args_text.get(event.content_index, ""))
        call.arguments = args
        if error is not None:
            self.invalid_args[call.id] = error

    def _finish(self, reason: str, usage: Usage | None, error: str | None) -> None:
        msg = self.message
        msg.stop_reason = reason  # type: ignore[assignment]
        if usage is not None:
            msg.usage = usage
            if not usage.total_tokens:
                usage.total_tokens = (usage.input_tokens + usage.output_tokens
                                      + usage.cache_read_tokens + usage.cache_write_tokens)
        msg.error_message = error
        self.finished = True
