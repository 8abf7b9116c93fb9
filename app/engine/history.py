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
    """The history as the model may see it (see module docstring).

    A result answers a call of the assistant message it follows, the first of that id not yet
    answered: ids are compared within that one turn only, so histories whose provider reused
    ids (``call_1`` every round, or twice in one reply) keep every result.
    """
    out: list[Message] = []
    open_calls: list[ToolCall] = []
    answered: set[int] = set()  # positions in open_calls

    def close_open() -> None:
        for i, call in enumerate(open_calls):
            if i not in answered:
                out.append(text_result(NO_RESULT, tool_call_id=call.id, tool_name=call.name,
                                       is_error=True))
        open_calls.clear()
        answered.clear()

    for msg in messages:
        if isinstance(msg, ToolResultMessage):
            i = _first_open(open_calls, answered, msg.tool_call_id)
            if i is not None:
                answered.add(i)
                out.append(msg)
            continue  # a result for no call the model can see: leave it out
        close_open()
        if isinstance(msg, AssistantMessage):
            if msg.stop_reason in ("error", "aborted"):
                continue  # dropped; its calls (never run) open nothing
            open_calls.extend(msg.tool_calls())
        out.append(msg)
    close_open()
    return out


def _first_open(calls: list[ToolCall], answered: set[int], call_id: str) -> int | None:
    return next((i for i, c in enumerate(calls) if c.id == call_id and i not in answered), None)


def unanswered_calls(messages: list[Message]) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no result yet (for resuming a run;
    the calls of a reply cut off by its length limit too: each still needs its result)."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if isinstance(msg, AssistantMessage):
            if msg.stop_reason in ("error", "aborted"):
                return []
            calls = msg.tool_calls()
            answered: set[int] = set()
            for result in messages[i + 1:]:
                if isinstance(result, ToolResultMessage):
                    j = _first_open(calls, answered, result.tool_call_id)
                    if j is not None:
                        answered.add(j)
            return [c for j, c in enumerate(calls) if j not in answered]
        if not isinstance(msg, ToolResultMessage):
            return []
    return []


def call_ids_in(messages: list[Message]) -> set[str]:
    """Every tool-call id a history already uses (calls and results)."""
    ids = {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)}
    for m in messages:
        if isinstance(m, AssistantMessage):
            ids.update(c.id for c in m.tool_calls())
    return ids
