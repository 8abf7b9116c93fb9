"""The only code that merges provider events into an ``AssistantMessage``.

``Accumulator.apply`` takes each event in stream order and returns nothing; the message under
construction is ``Accumulator.message``. Tool-call arguments are re-parsed on every delta so that
the partial message (and the loop's ``toolcall_delta`` event) always carries the best arguments
known so far; that preview is all a partial parse is for. A call is runnable only once its
``toolcall_end`` came and its whole arguments text is one JSON object: otherwise (bad JSON, or
the reply finished while the call was still open) ``invalid_args`` says why, and the loop
answers it with an ``is_error`` result instead of running it on cut-off arguments.

Tool-call ids are unique within a run. Several OpenAI-compatible servers number their calls
``call_1``, ``call_2`` … afresh every reply, some even repeat an id inside one reply, and the
loop pairs each result with its call by id. So each call's id is fixed when it opens: the
provider's own id while no earlier call (``taken_ids``: the run's history and this reply)
has it, else a fresh ``call_<hex>``. Every event, result and stored message then carries that
one id, and each adapter sends it back as the call's wire id (OpenAI ``tool_call_id`` and
Responses ``call_id``, Anthropic ``tool_use_id``, Bedrock ``toolUseId``; Gemini pairs by order).
Every adapter accepts ids it did not mint, and a provider that repeats ids cannot have needed
them back to tell its calls apart.
"""

from __future__ import annotations

import uuid
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

UNFINISHED_CALL = ("the reply ended before this tool call was finished, so its arguments may be "
                   "cut off; issue the call again")


def new_call_id() -> str:
    """A fresh tool-call id (fits every provider's id alphabet and OpenAI's 40-character cap)."""
    return f"call_{uuid.uuid4().hex[:24]}"


class Accumulator:
    """Builds one assistant message from one provider stream."""

    __slots__ = ("_args_text", "_blocks", "_open_calls", "_taken", "finished", "invalid_args",
                 "message")

    def __init__(self, provider: str, model: str, *, taken_ids: set[str] | None = None) -> None:
        """``taken_ids``: tool-call ids already used in this run; the ids given to this reply's
        calls are added to it (pass the run's own set so later replies see them)."""
        self.message = AssistantMessage(provider=provider, model=model)
        self.finished = False
        self.invalid_args: dict[str, str] = {}
        """Tool-call id → why the call must not run (bad or unfinished arguments)."""
        # content_index (the provider's) → position in message.content
        self._blocks: dict[int, int] = {}
        self._args_text: dict[int, str] = {}
        self._open_calls: set[int] = set()
        self._taken = taken_ids if taken_ids is not None else set()

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
                self._open_call(i, call_id, name)
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

    def _open_call(self, index: int, wire_id: str, name: str) -> None:
        """Open a tool call under its run-unique id (see the module doc)."""
        call_id = wire_id if wire_id and wire_id not in self._taken else new_call_id()
        while call_id in self._taken:
            call_id = new_call_id()
        self._taken.add(call_id)
        self._open(index, ToolCall(id=call_id, name=name))
        self._args_text[index] = ""
        self._open_calls.add(index)

    def _block(self, index: int, kind: type[_B], wire_id: str = "") -> _B:
        pos = self._blocks.get(index)
        if pos is None:  # a delta without its start: open the block implicitly
            if kind is ToolCall:
                self._open_call(index, wire_id, "")
            else:
                self._open(index, TextContent(text="") if kind is TextContent
                           else ThinkingContent(thinking=""))
            pos = self._blocks[index]
        block = self.message.content[pos]
        if not isinstance(block, kind):
            raise ValueError(f"content_index {index} is a {block.type}, not a {kind.__name__}")
        return block

    def _close_call(self, event: ToolCallEnd) -> None:
        # the id stays the one the call opened with: events already carry it
        call = self._block(event.content_index, ToolCall, event.id or "")
        self._open_calls.discard(event.content_index)
        if event.name:
            call.name = event.name
        if event.signature is not None:
            call.signature = event.signature
        args, error = parse_complete_object(self._args_text.get(event.content_index, ""))
        call.arguments = args
        if error is not None:
            self.invalid_args[call.id] = error

    def _finish(self, reason: str, usage: Usage | None, error: str | None) -> None:
        for index in sorted(self._open_calls):  # no toolcall_end: never run on a prefix
            call = self.message.content[self._blocks[index]]
            if isinstance(call, ToolCall):
                self.invalid_args[call.id] = UNFINISHED_CALL
        self._open_calls.clear()
        msg = self.message
        msg.stop_reason = reason  # type: ignore[assignment]
        if usage is not None:
            msg.usage = usage
            if not usage.total_tokens:
                usage.total_tokens = (usage.input_tokens + usage.output_tokens
                                      + usage.cache_read_tokens + usage.cache_write_tokens)
        msg.error_message = error
        self.finished = True
