"""A nested loop (``runtime.exec`` inside a tool body) that parks the whole run, and how the
run continues once its picks are answered.

The nested loop stops at its waiting picks (``approval_requested`` with ``depth`` and
``parent_tool_call_id``), ``runtime.exec`` raises ``NestedParked`` through the tool body, and
every loop up to the run's own parks (no result for the calls in between). What each nested
loop did so far is in the run's log; nothing else is stored. When the run is woken, the
depth-0 call is run again (its ``tool_execution_start`` is not sent twice), and each
``runtime.exec`` in its body is matched by (parent tool call, ordinal of the exec in that body)
to what the log holds for it::

    log: tool_execution_start(P) ─ agent_start(1,P) ─ turn_start(1,P) ─ message_end(1,P)… ─
         approval_requested(N, depth 1, parent P) ─ [parked] ─ approval_decided(N)
    woken: P's body runs again ─ runtime.exec #0 ─ Replay: resume from its messages, rounds and
         open turn (no model call for turns taken, no event sent twice) ─ N runs or is denied ─ …

An exec whose loop had ended before the park (its ``agent_end`` is in the log) returns what it
returned then, without a model call. The body's own code before the exec runs again, so it
should be idempotent (LangGraph's interrupt makes the same contract). A steer or a cancel that
wakes the run skips the depth-0 call instead of running it: its nested loops are closed in the
log (``close_under``) with the skip's result for their waiting picks and open calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from app.engine.approvals import ApprovalGate, WaitingCall
from app.engine.events import (
    AgentEnd,
    Event,
    MessageEnd,
    MessageStart,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
)
from app.engine.resume import EventLog, closer, ended_fields, lost_reply, stored_events
from app.engine.resume_point import Resume
from providers.messages import (
    AssistantMessage,
    Message,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    load_messages,
    message_adapter,
)

Key = tuple[str, int]
"""(the tool call whose body runs the loop, the ordinal of its ``runtime.exec`` call)."""


@dataclass(slots=True)
class NestedLoop:
    """One nested loop as the log holds it."""

    messages: list[Message] = field(default_factory=list)
    """Its ``message_end``s: the prompt, replies and tool results (its checkpoint)."""
    rounds: int = 0
    turn_open: bool = False
    ended: dict[str, Any] | None = None
    """Its ``agent_end``: it finished before the park."""
    open_calls: list[str] = field(default_factory=list)
    """Its tool calls with a ``tool_execution_start`` and no end (a deeper loop parked)."""

    def resume(self) -> Resume:
        """Where the loop goes on from (its sent events are not sent again)."""
        return Resume(messages=list(self.messages), rounds=self.rounds,
                      turn_open=self.turn_open, started_calls=frozenset(self.open_calls))

    def exec_result(self) -> tuple[str | None, list[Message], str, Usage, str | None, Any]:
        """What ``runtime.exec`` returned from this loop (``text, messages, stop_reason,
        usage, error, output``), read from its ``agent_end``."""
        assert self.ended is not None
        reason, error, text, usage, output = ended_fields(self.ended)
        return text, load_messages(self.ended.get("messages") or []), reason, usage, error, output


@dataclass(slots=True)
class Replay:
    """The nested loops a woken run continues (see the module docstring)."""

    loops: dict[Key, NestedLoop] = field(default_factory=dict)
    waiting: list[WaitingCall] = field(default_factory=list)
    """The nested picks the run waited for."""
    top_open: set[str] = field(default_factory=set)
    """Depth-0 calls started and not ended: their nested loops parked."""
    spans: list[dict[str, Any]] = field(default_factory=list)
    """Starts without an end at depth >= 1, outermost first."""
    roots: dict[str, str] = field(default_factory=dict)
    """Tool call id → the depth-0 call whose body (at some depth) made it."""
    current: dict[str, Key] = field(default_factory=dict)
    """Parent call → the key of its latest nested loop."""

    def loop(self, parent: str, ordinal: int) -> NestedLoop | None:
        """The logged loop of ``parent``'s ``ordinal``-th exec (None: it never started)."""
        return self.loops.get((parent, ordinal))

    def unanswered(self, gate: ApprovalGate | None) -> bool:
        """Whether a nested pick the run waited for has no answer (a steer woke it)."""
        return gate is not None and any(gate.decision(ToolCall(
            id=c.tool_call_id, name=c.tool_name, arguments=c.args)) is None
            for c in self.waiting)

    def root_of(self, parent: str | None) -> str | None:
        return None if parent is None else self.roots.get(parent, parent)

    def close_under(self, root: str, note: str) -> list[Event]:
        """Events closing every nested loop under the depth-0 call ``root`` that is skipped
        with ``note`` (a steer or a cancel woke the run): waiting picks and open calls get
        ``note`` as an ``is_error`` result, open turns their ``turn_end``, loops an
        ``agent_end`` (``aborted``), innermost first."""
        out: list[Event] = []
        added: dict[str | None, list[Message]] = {}
        for span in reversed([s for s in self.spans if self.root_of(
                s.get("parent_tool_call_id")) == root]):
            depth, parent = span.get("depth", 0), span.get("parent_tool_call_id")
            kind = span["type"]
            logged = self._current(parent)
            new = added.setdefault(parent, [])
            if kind == "turn_start":
                for call in self.waiting:
                    if call.depth == depth and call.parent_tool_call_id == parent:
                        out.append(_stamp(ToolExecutionStart(
                            tool_call_id=call.tool_call_id, tool_name=call.tool_name,
                            args=call.args), depth, parent))
                        new.append(_skip(out, call.tool_call_id, call.tool_name, note,
                                         depth, parent))
                history = [*logged.messages, *new]
                reply = next((m for m in reversed(history) if isinstance(m, AssistantMessage)),
                             lost_reply())
                at = max((i for i, m in enumerate(history) if m is reply), default=-1)
                results = [m for m in history[at + 1:] if isinstance(m, ToolResultMessage)]
                out.append(_stamp(TurnEnd(message=reply, tool_results=results), depth, parent))
            elif kind == "tool_execution_start":
                new.append(_skip(out, span["tool_call_id"], span["tool_name"], note, depth,
                                 parent))
            elif kind == "agent_start":
                out.append(_stamp(AgentEnd(stop_reason="aborted", error=note, usage=Usage(),
                                           messages=[*logged.messages, *new]), depth, parent))
            elif (end := closer(span)) is not None:  # a message left open: never the history
                out.append(end)
        return out

    def _current(self, parent: str | None) -> NestedLoop:
        key = self.current.get(parent or "")
        return self.loops.get(key, NestedLoop()) if key is not None else NestedLoop()


def _stamp(event: Event, depth: int, parent: str | None) -> Event:
    event.depth, event.parent_tool_call_id = depth, parent
    return event


def _skip(out: list[Event], call_id: str, name: str, note: str, depth: int,
          parent: str | None) -> ToolResultMessage:
    """A skipped call's end and result message (appended to ``out``); the message."""
    msg = ToolResultMessage(tool_call_id=call_id, tool_name=name,
                            content=[TextContent(text=note)], is_error=True)
    out.append(_stamp(ToolExecutionEnd(tool_call_id=call_id, tool_name=name,
                                       result={"content": msg.content, "details": None},
                                       is_error=True), depth, parent))
    out.append(_stamp(MessageStart(message=msg), depth, parent))
    out.append(_stamp(MessageEnd(message=msg), depth, parent))
    return msg


def scan(events: Iterable[dict[str, Any]], waiting: list[WaitingCall]) -> Replay:
    """Fold a run's log (stored events, oldest first) into a ``Replay``. A call's loops are
    those since its latest ``tool_execution_start`` (a crash-resumed call starts afresh)."""
    replay = Replay(waiting=waiting)
    ordinals: dict[str, int] = {}
    for event in events:
        _fold(replay, ordinals, event)
    return replay


def _fold(replay: Replay, ordinals: dict[str, int], event: dict[str, Any]) -> None:
    kind, depth = event.get("type"), event.get("depth", 0)
    parent: str | None = event.get("parent_tool_call_id")
    call_id = str(event.get("tool_call_id") or "")
    if kind == "tool_execution_start":
        ordinals[call_id] = 0
        for key in [k for k in replay.loops if k[0] == call_id]:
            del replay.loops[key]
        replay.roots[call_id] = replay.root_of(parent) or call_id
        if depth == 0:
            replay.top_open.add(call_id)
    elif kind == "tool_execution_end" and depth == 0:
        replay.top_open.discard(call_id)
    if depth == 0 or parent is None:
        return
    _track_span(replay.spans, event)
    if kind == "agent_start":
        key = (parent, ordinals.get(parent, 0))
        ordinals[parent] = key[1] + 1
        replay.loops[key] = NestedLoop()
        replay.current[parent] = key
    found = replay.current.get(parent)
    loop = replay.loops.get(found) if found is not None else None
    if loop is None:
        return
    if kind == "message_end":
        loop.messages.append(message_adapter.validate_python(event["message"]))
    elif kind == "turn_start":
        loop.rounds, loop.turn_open = loop.rounds + 1, True
    elif kind == "turn_end":
        loop.turn_open = False
    elif kind == "agent_end":
        loop.ended = event
    elif kind == "tool_execution_start":
        loop.open_calls.append(call_id)
    elif kind == "tool_execution_end" and call_id in loop.open_calls:
        loop.open_calls.remove(call_id)


_ENDS = {"agent_end": "agent_start", "turn_end": "turn_start", "message_end": "message_start",
         "tool_execution_end": "tool_execution_start"}


def _track_span(spans: list[dict[str, Any]], event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind in _ENDS.values():
        spans.append(event)
        return
    start = _ENDS.get(kind)
    if start is None:
        return
    for i in range(len(spans) - 1, -1, -1):
        span = spans[i]
        if (span["type"] == start and span.get("depth", 0) == event.get("depth", 0)
                and span.get("parent_tool_call_id") == event.get("parent_tool_call_id")
                and span.get("tool_call_id") == event.get("tool_call_id")):
            del spans[i]
            return


async def read_replay(backend: EventLog, run_id: str, waiting: list[WaitingCall],
                      page: int = 1000) -> Replay:
    """Scan the run's whole log (a woken run whose nested loops parked)."""
    return scan([e async for e in stored_events(backend, run_id, page)], waiting)
