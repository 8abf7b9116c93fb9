"""Where a resumed run stands: what the loop needs to finish the turn a lost worker left open."""

from __future__ import annotations

from dataclasses import dataclass

from providers.messages import AssistantMessage, Message, ToolResultMessage


@dataclass(slots=True, kw_only=True)
class Resume:
    """Where a run taken over from a lost worker stands (``app.engine.resume`` reads it from the
    log).
    The events of ``messages`` were written; the loop sends no ``agent_start``, continues an
    open turn and counts ``rounds`` against ``max_iterations``."""

    messages: list[Message]
    """What the run had added (its checkpoint), already part of ``context``."""
    rounds: int = 0
    """Rounds already made (depth-0 ``turn_start``s written)."""
    turn_open: bool = False
    """The last of them has no ``turn_end``: the loop finishes that turn first."""
    started_calls: frozenset[str] = frozenset()
    """Calls of the open turn whose ``tool_execution_start`` is in the log and which run again
    without a second one: a nested loop in their body parked the run (``app.engine.nested``)."""


def last_reply(resume: Resume) -> AssistantMessage | None:
    """The reply of the last round made, or None when that round's model call never ended."""
    replies = [m for m in resume.messages if isinstance(m, AssistantMessage)]
    if not replies or (resume.turn_open and len(replies) < resume.rounds):
        return None
    return replies[-1]


def results_after(context: list[Message], reply: AssistantMessage) -> list[ToolResultMessage]:
    """The tool results that follow ``reply`` in the history (its turn's results)."""
    at = max(i for i, m in enumerate(context) if m is reply)
    return [m for m in context[at + 1:] if isinstance(m, ToolResultMessage)]
