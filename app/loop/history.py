"""Conversation-history rules applied before every model call, and on resume.

``repair`` returns the list actually sent to the provider (the stored history is not changed):
assistant messages that ended in ``error``/``aborted`` are left out together with their tool
results, and a tool call without a result gets an ``is_error`` result ``No result provided`` right
after the results it does have.
"""

from __future__ import annotations

from providers.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    text_result,
)

NO_RESULT = "No result provided"


def repair(messages: list[Message]) -> list[Message]:
    """The history as the model may see it (see module docstring)."""
    out: list[Message] = []
    dropped_calls: set[str] = set()
    open_calls: list[ToolCall] = []
    answered: set[str] = set()

    def close_open() -> None:
        for call in open_calls:
            if call.id not in answered:
                out.append(text_result(NO_RESULT, tool_call_id=call.id, tool_name=call.name,
                                        is_error=True))
        open_calls.clear()

    for msg in messages:
        if isinstance(msg, ToolResultMessage):
            if msg.tool_call_id in dropped_calls or msg.tool_call_id in answered:
                continue
            if any(c.id == msg.tool_call_id for c in open_calls):
                answered.add(msg.tool_call_id)
                out.append(msg)
            continue  # a result for no call the model can see: leave it out
        close_open()
        if isinstance(msg, AssistantMessage):
            if msg.stop_reason in ("error", "aborted"):
                dropped_calls.update(c.id for c in msg.tool_calls())
                continue
            open_calls.extend(msg.tool_calls())
        out.append(msg)
    close_open()
    return out


def unanswered_calls(messages: list[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet (for resuming a run)."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if isinstance(msg, AssistantMessage):
            if msg.stop_reason in ("error", "aborted", "length"):
                return []
            done = {m.tool_call_id for m in messages[i + 1:] if isinstance(m, ToolResultMessage)}
            return [c for c in msg.tool_calls() if c.id not in done]
        if not isinstance(msg, ToolResultMessage):
            return []
    return []
