"""What a run's log says about the attempt that stopped: read once when another worker resumes.

A worker can die anywhere, so the log it leaves may hold starts without their ends (a tool
call that was running, a reply that was streaming, a loop nested inside a tool). The resumed
attempt first closes each of them with an end that says the worker was lost, innermost first,
and then carries on as the loop would have::

    … turn_start(3) ─ message_end(reply) ─ tool_execution_start(X) ─┤ worker dies
    tool_execution_end(X, is_error: "worker lost") ─ run_resumed ─
      tool_execution_start(X) ─ tool_execution_end(X) ─ message_end(result) ─ turn_end(3) ─ …

The run's own ``agent_start`` and open ``turn_start`` are not closed: the resumed loop
continues that turn (re-running unanswered calls, or making the interrupted model call again)
and ends it itself. ``rounds`` (depth-0 ``turn_start``s) is how many rounds ``max_iterations``
has already counted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from app.engine.events import AgentEnd, Event, MessageEnd, ToolExecutionEnd, TurnEnd
from providers.messages import AssistantMessage, Message, Usage, message_adapter


class StoredEventLike(Protocol):
    """One stored event as a log hands it out (``app.store.records.StoredEvent``)."""

    @property
    def seq(self) -> int: ...

    @property
    def data(self) -> bytes: ...


class EventLog(Protocol):
    """What the engine reads of a run's stored log (the store's ``EventLog`` has it)."""

    async def read_events(self, run_id: str, after: int,
                          limit: int = 1000) -> Sequence[StoredEventLike]:
        """Events with ``seq > after``, oldest first, at most ``limit``."""
        ...


WORKER_LOST = "The worker running this was lost; the run resumed on another worker."
TOOL_LOST = ("Tool execution interrupted: the worker running it was lost. The call runs again "
             "on the worker that resumed the run.")
_ENDS = {"agent_end": "agent_start", "turn_end": "turn_start", "message_end": "message_start",
         "tool_execution_end": "tool_execution_start"}


@dataclass(slots=True)
class LogState:
    """The log left by earlier attempts (see the module docstring)."""

    started: bool = False
    """The run's ``agent_start`` was written."""
    ended: dict[str, Any] | None = None
    """The run's ``agent_end``, when it was written (the run then only needs closing)."""
    rounds: int = 0
    """Depth-0 ``turn_start``s written: rounds already made."""
    turn_open: bool = False
    """The last depth-0 turn has no ``turn_end``."""
    open_spans: list[dict[str, Any]] = field(default_factory=list)
    """Starts without an end, outermost first."""

    def closers(self) -> list[Event]:
        """Ends for the open starts, innermost first (the run's loop and turn excepted)."""
        return [c for span in reversed(self.open_spans) if (c := closer(span)) is not None]


async def read_log_state(backend: EventLog, run_id: str, page: int = 1000) -> LogState:
    """Scan the run's whole log, a page at a time (only when a run is resumed)."""
    state = LogState()
    async for event in stored_events(backend, run_id, page):
        _fold(state, event)
    return state


async def stored_events(backend: EventLog, run_id: str, page: int = 1000
                        ) -> AsyncIterator[dict[str, Any]]:
    """The run's whole log, oldest first, decoded, read a page at a time."""
    after = 0
    while True:
        events = await backend.read_events(run_id, after, limit=page)
        for stored in events:
            yield orjson.loads(stored.data)
        if len(events) < page:
            return
        after = events[-1].seq


def scan(events: Iterable[dict[str, Any]]) -> LogState:
    """Fold a log (stored events, oldest first) into a ``LogState``."""
    state = LogState()
    for event in events:
        _fold(state, event)
    return state


def _fold(state: LogState, event: dict[str, Any]) -> None:
    kind, depth = event.get("type"), event.get("depth", 0)
    if kind in ("agent_start", "turn_start", "message_start", "tool_execution_start"):
        state.open_spans.append(event)
    elif kind in _ENDS:
        _pop(state.open_spans, _ENDS[kind], event)
    if depth == 0:
        if kind == "agent_start":
            state.started = True
        elif kind == "agent_end":
            state.ended = event
        elif kind == "turn_start":
            state.rounds, state.turn_open = state.rounds + 1, True
        elif kind == "turn_end":
            state.turn_open = False


def _pop(spans: list[dict[str, Any]], start: str, end: dict[str, Any]) -> None:
    """Drop the innermost open ``start`` the ``end`` closes (same depth, same call)."""
    for i in range(len(spans) - 1, -1, -1):
        span = spans[i]
        if span["type"] == start and span.get("depth", 0) == end.get("depth", 0) and \
                span.get("tool_call_id") == end.get("tool_call_id"):
            del spans[i]
            return


def closer(span: dict[str, Any]) -> Event | None:
    """The end that closes ``span`` as lost (None for the run's own loop and turn)."""
    depth, parent = span.get("depth", 0), span.get("parent_tool_call_id")
    kind = span["type"]
    if depth == 0 and kind in ("agent_start", "turn_start"):
        return None
    event: Event
    if kind == "tool_execution_start":
        event = ToolExecutionEnd(tool_call_id=span["tool_call_id"], tool_name=span["tool_name"],
                                 result={"content": [{"type": "text", "text": TOOL_LOST}],
                                         "details": None}, is_error=True)
    elif kind == "message_start":
        event = MessageEnd(message=_lost_message(span["message"]))
    elif kind == "turn_start":
        event = TurnEnd(message=lost_reply(), tool_results=[])
    else:
        event = AgentEnd(stop_reason="error", error=WORKER_LOST, usage=Usage(), messages=[])
    event.depth, event.parent_tool_call_id = depth, parent
    return event


def lost_reply() -> AssistantMessage:
    """An assistant reply cut off by the lost worker (never part of the history)."""
    return AssistantMessage(stop_reason="error", error_message=WORKER_LOST)


def _lost_message(data: dict[str, Any]) -> Message:
    message: Message = message_adapter.validate_python(data)
    if isinstance(message, AssistantMessage):
        return AssistantMessage(provider=message.provider, model=message.model,
                                stop_reason="error", error_message=WORKER_LOST)
    return message


def ended_fields(end: dict[str, Any]) -> tuple[Any, str | None, str | None, Usage, Any]:
    """``(stop_reason, error, result, usage, output)`` of a written ``agent_end`` (its run's
    final fields, for a run whose worker was lost between that event and the close)."""
    texts = ["".join(b.get("text", "") for b in m.get("content", []) if b.get("type") == "text")
             for m in end.get("messages", []) if m.get("role") == "assistant"]
    result = next((t for t in reversed(texts) if t), None)
    return (end["stop_reason"], end.get("error"), result, Usage(**end.get("usage", {})),
            end.get("output"))
