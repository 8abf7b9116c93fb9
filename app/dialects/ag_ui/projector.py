"""AG-UI events (protocol 1.0, typed and encoded by ``ag-ui-protocol``), projected from a run's
stored events.

Native event → AG-UI events:

    run_created              RUN_STARTED {threadId, runId: our run id}; on a reconnect, then
                             MESSAGES_SNAPSHOT of the conversation before the run (the client
                             drops what it had of the run, which the replay rebuilds)
    turn_start / turn_end    STEP_STARTED / STEP_FINISHED {stepName: "turn <n>"}
    message_update           TEXT_MESSAGE_*, REASONING_*, TOOL_CALL_START/ARGS/END
    message_start (user)     TEXT_MESSAGE_* with role user: a steering or follow-up message
    tool_execution_update    CUSTOM {name: "agentloop.tool_progress"}
    tool_execution_end       TOOL_CALL_RESULT {content: the result's text}
    data                     CUSTOM {name: the data's name, value: {id, data, toolCallId}}
    state_snapshot / _delta  STATE_SNAPSHOT {snapshot} / STATE_DELTA {delta: the JSON Patch}
    agent_start / agent_end  SUBAGENT_STARTED / SUBAGENT_FINISHED or SUBAGENT_ERROR (depth > 0)
    agent_end (depth 0)      RUN_FINISHED (outcome success, or cancelled) or RUN_ERROR;
                             structured output: STATE_DELTA adding /output, and the result
    run_resumed              the blocks a crashed worker left open are closed, except the
                             run's step and the reply it was streaming: the resumed attempt
                             streams that reply again into the same message, and only what
                             the client does not have yet is sent (``app.dialects.takeover``;
                             CUSTOM {name: "agentloop.superseded", value: {messageId}} when
                             the new attempt says something else)
    client_tool_requested    (the call was streamed as TOOL_CALL_*): once the run parks on
                             such frontend tools, RUN_FINISHED ends this AG-UI run with the
                             pending calls; the client's next input carries their results
    approval_requested       CUSTOM {name: "agentloop.approval_requested"}; the stream stays
                             open until POST /runs/{id}/approvals answers (AG-UI has no
                             approvals)
    approval_requested,      (depth > 0: a subagent's pick) CUSTOM {name: "agentloop.<type>",
    client_tool_requested    value: {…, depth, parentToolCallId, subagentRunId}}; answered at
                             /runs/{id}/approvals or /tool_results, the stream staying open

A nested loop is a subagent: its events carry ``subagentRunId``, and it names the tool call
that runs it (``parentToolCallId``). Every opened block is closed before the run's end, as the
client's event verifier demands.
"""

from __future__ import annotations

from typing import Any

import orjson
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from app.dialects.ag_ui.messages import result_message_id
from app.dialects.ag_ui.takeover import AgUiTakeover
from app.dialects.ag_ui.wire import ENCODER, AgUiEvent, Delta, final_text, loop_of, millis
from app.dialects.nested import result_text
from app.dialects.takeover import Key, Rewind, is_lost_reply, lost_tool_end


class AgUiProjector(AgUiTakeover):
    """Native events (in log order) → AG-UI SSE frames; see the module docstring.
    ``history``: the conversation before the run, as AG-UI messages, for a reconnect's
    snapshot (None: the client sent it and has it)."""

    def __init__(self, thread_id: str, history: list[dict[str, Any]] | None = None, *,
                 continues_after: int | None = None) -> None:
        super().__init__()
        self.thread_id = thread_id
        self._history = history
        self._continues_after = continues_after  # an answer's stream: the log before it
        self._waiting: set[str] = set()  # frontend tool calls the client has to run
        self._answered: set[str] = set()  # ... and has answered (its own tool message)
        self._run_id = ""
        self._seq = 0
        self._ts: int | None = None
        self._open: dict[tuple[str, str], BaseEvent] = {}  # what is open → the event closing it
        self._message: dict[tuple[int, str], str] = {}  # loop → its reply streaming now
        self._calls: dict[str, tuple[str, str | None]] = {}  # call id → (tool, its subagent)
        self._subagents: dict[str, str] = {}  # tool call id → the subagent it runs
        self._announced: set[str] = set()
        self._turns: dict[tuple[int, str], int] = {}  # loop → its current turn
        self._replied = False

    def feed(self, event: dict[str, Any]) -> list[bytes]:
        """The frames of one event."""
        self._seq = int(event.get("seq", self._seq))
        self._ts = millis(event.get("ts"))
        if self._continues_after is not None and self._seq > self._continues_after:
            self._continues_after = None
            self._open.clear()  # the response that ended at the park closed them
        return [self._frame(e) for e in self._events(event)]

    def finish(self) -> list[bytes]:
        """Nothing: the stream ends with RUN_FINISHED or RUN_ERROR."""
        return []

    def waits_on_client(self) -> bool:
        """Whether the run waits for frontend tools' results."""
        return bool(self._waiting)

    def pause(self) -> list[bytes]:
        """The end of this AG-UI run while its frontend tool calls are pending."""
        done = RunFinishedEvent(thread_id=self.thread_id, run_id=self._run_id)
        return [self._frame(e) for e in [*self._settle(), *self._unheld(),
                                          *self._close(lambda _: True), done]]

    def _hitl(self, event: dict[str, Any]) -> list[AgUiEvent]:
        call_id, kind = event["tool_call_id"], event["type"]
        if kind == "approval_decided":
            self._waiting.discard(call_id)
            if event["decision"] == "result":
                self._answered.add(call_id)
            return []
        self._calls.setdefault(call_id, (event["tool_name"], None))
        out = self._announce(call_id, event["args"], None)
        if kind == "client_tool_requested":
            self._waiting.add(call_id)
            return out
        return [*out, CustomEvent(name="agentloop.approval_requested", value={
            "toolCallId": call_id, "toolName": event["tool_name"], "args": event["args"],
            "runId": event["run_id"]})]

    def _nested_hitl(self, event: dict[str, Any]) -> list[AgUiEvent]:
        """A subagent's pick waiting for a person: CUSTOM ``agentloop.approval_requested`` /
        ``agentloop.client_tool_requested`` naming its depth and parent call (its call was
        streamed in the subagent); the stream stays open until the native endpoint answers."""
        if event["type"] == "approval_decided":
            return []
        return [CustomEvent(name=f"agentloop.{event['type']}", value={
            "toolCallId": event["tool_call_id"], "toolName": event["tool_name"],
            "args": event["args"], "runId": event["run_id"], "depth": event["depth"],
            "parentToolCallId": event["parent_tool_call_id"],
            "subagentRunId": self._sub(event)})]

    def _frame(self, event: BaseEvent | Delta) -> bytes:
        if isinstance(event, Delta):
            return b"id: %d\ndata: %s\n\n" % (self._seq, event.json(self._ts))
        if self._ts is not None and event.timestamp is None:
            event.timestamp = self._ts
        return b"id: %d\n%s" % (self._seq, ENCODER.encode(event).encode())

    def _sub(self, event: dict[str, Any]) -> str | None:
        """The subagent an event of a nested loop belongs to (None at depth 0)."""
        parent = event.get("parent_tool_call_id")
        return self._subagents.get(parent) if parent else None

    def _events(self, event: dict[str, Any]) -> list[AgUiEvent]:
        kind, sub = event.get("type"), self._sub(event)
        if kind in ("approval_requested", "client_tool_requested", "approval_decided"):
            return self._hitl(event) if not event.get("depth") else self._nested_hitl(event)
        if kind == "run_created":
            self._run_id = event["run_id"]
            return self._run_start(event["run_id"])
        if kind == "run_resumed":
            return self._resumed()
        if kind == "agent_start":
            return self._agent_start(event) if event.get("depth") else []
        if kind == "turn_start":
            self._turns[loop_of(event)] = int(event["turn"])
        if kind in ("turn_start", "turn_end"):
            return self._step(kind, f"turn {self._turns.get(loop_of(event), 0)}", sub)
        if kind == "message_start":
            return self._message_start(event, sub)
        if kind == "message_update":
            return self._delta(event["delta"], loop_of(event), sub)
        if kind == "message_end":
            return self._message_end(event)
        if kind == "tool_execution_start":
            self._calls[event["tool_call_id"]] = (event["tool_name"], sub)
            return self._announce(event["tool_call_id"], event["args"], sub)
        if kind == "tool_execution_update":
            return [CustomEvent(name="agentloop.tool_progress", subagent_run_id=sub,
                                value={"toolCallId": event["tool_call_id"],
                                       "partialResult": event["partial_result"]})]
        if kind == "tool_execution_end":
            return self._tool_end(event, sub)
        if kind == "agent_end":
            return self._agent_end(event, sub) if event.get("depth") else self._run_end(event)
        if kind == "data":
            return [CustomEvent(name=event["name"], subagent_run_id=sub, value={
                "id": event.get("id"), "data": event.get("data"),
                "toolCallId": event["tool_call_id"]})]
        if kind == "state_snapshot":
            return [StateSnapshotEvent(snapshot=event["state"])]
        if kind == "state_delta":
            return [_delta(event["delta"])]
        return []

    def _run_start(self, run_id: str) -> list[AgUiEvent]:
        started = RunStartedEvent(thread_id=self.thread_id, run_id=run_id)
        if self._history is None:
            return [started]
        return [started, MessagesSnapshotEvent.model_validate(
            {"type": "MESSAGES_SNAPSHOT", "messages": self._history})]

    def _agent_start(self, event: dict[str, Any]) -> list[AgUiEvent]:
        call_id = str(event["parent_tool_call_id"])
        tool, parent = self._calls.get(call_id, ("tool", None))
        sub_id = f"{event['run_id']}-sub{self._seq}"
        self._subagents[call_id] = sub_id
        self._open[("subagent", sub_id)] = SubagentErrorEvent(
            subagent_run_id=sub_id, message="the worker running it stopped")
        return [SubagentStartedEvent(subagent_run_id=sub_id, name=tool, parent_tool_call_id=call_id,
                                     parent_subagent_run_id=parent)]

    def _agent_end(self, event: dict[str, Any], sub: str | None) -> list[AgUiEvent]:
        if sub is None:
            return []
        self._open.pop(("subagent", sub), None)
        if event["stop_reason"] in ("error", "aborted"):
            return [SubagentErrorEvent(subagent_run_id=sub, message=event.get("error") or
                                       event["stop_reason"], code=event["stop_reason"])]
        return [SubagentFinishedEvent(subagent_run_id=sub, result=final_text(event))]

    def _step(self, kind: str, name: str, sub: str | None) -> list[AgUiEvent]:
        key = ("step", f"{sub}/{name}")
        if kind == "turn_start":
            self._open[key] = StepFinishedEvent(step_name=name, subagent_run_id=sub)
            return [StepStartedEvent(step_name=name, subagent_run_id=sub)]
        closing = self._open.pop(key, None)
        return [closing] if closing is not None else []

    def _message_start(self, event: dict[str, Any], sub: str | None) -> list[AgUiEvent]:
        message, depth = event["message"], int(event["depth"])
        message_id = f"{event['run_id']}-m{self._seq}"
        if message.get("role") == "assistant":
            if depth == 0 and self._lost is not None:  # the lost reply, streamed again
                self._rewind, message_id, self._cut = self._lost
                self._lost = None
            elif depth == 0:
                self._shown.clear()
            self._message[loop_of(event)] = message_id
            self._replied = self._replied or depth == 0
            return []
        if message.get("role") != "user" or depth or not self._replied:
            return []
        content = message["content"]
        text = content if isinstance(content, str) else result_text(content)
        return [TextMessageStartEvent(message_id=message_id, role="user"),
                *([TextMessageContentEvent(message_id=message_id, delta=text)] if text else []),
                TextMessageEndEvent(message_id=message_id)]

    def _delta(self, delta: dict[str, Any], loop: tuple[int, str],
               sub: str | None) -> list[AgUiEvent]:
        before: list[AgUiEvent] = []
        if loop[0] == 0 and self._rewind is not None:
            before, rest = self._rewound(delta, loop, sub)
            if rest is None:
                return before
            delta = rest
        kind = delta["kind"]
        message_id = self._message.get(loop, f"m{self._seq}")
        if loop[0] == 0 and kind != "toolcall_start" and kind != "toolcall_end":
            key: Key = ("call", delta["tool_call_id"]) if kind == "toolcall_delta" else \
                ("text" if kind == "text_delta" else "reasoning", "")
            self._shown.add(key, delta["text"])
        return [*before, *self._block(delta, message_id, sub)]

    def _block(self, delta: dict[str, Any], message_id: str, sub: str | None
               ) -> list[AgUiEvent]:
        kind = delta["kind"]
        if kind == "text_delta":
            return self._text(message_id, delta["text"], sub)
        if kind == "thinking_delta":
            return self._reasoning(f"{message_id}-reasoning", delta["text"], sub)
        call_id = delta["tool_call_id"]
        if kind == "toolcall_start":
            self._announced.add(call_id)
            self._open[("call", call_id)] = ToolCallEndEvent(tool_call_id=call_id,
                                                             subagent_run_id=sub)
            return [ToolCallStartEvent(tool_call_id=call_id, tool_call_name=delta["tool_name"],
                                       parent_message_id=message_id, subagent_run_id=sub)]
        if kind == "toolcall_delta":
            if not delta["text"] or ("call", call_id) not in self._open:
                return []
            return [Delta("TOOL_CALL_ARGS", "toolCallId", call_id, delta["text"], sub)]
        closing = self._open.pop(("call", call_id), None)
        return [closing] if closing is not None else []

    def _text(self, message_id: str, text: str, sub: str | None) -> list[AgUiEvent]:
        out: list[AgUiEvent] = []
        if ("text", message_id) not in self._open:
            self._open[("text", message_id)] = TextMessageEndEvent(message_id=message_id,
                                                                   subagent_run_id=sub)
            out.append(TextMessageStartEvent(message_id=message_id, role="assistant",
                                             subagent_run_id=sub))
        if text:
            out.append(Delta("TEXT_MESSAGE_CONTENT", "messageId", message_id, text, sub))
        return out

    def _reasoning(self, message_id: str, text: str, sub: str | None) -> list[AgUiEvent]:
        out: list[AgUiEvent] = []
        if ("reasoning", message_id) not in self._open:
            self._open[("reasoning", message_id)] = ReasoningMessageEndEvent(
                message_id=message_id, subagent_run_id=sub)
            self._open[("span", message_id)] = ReasoningEndEvent(message_id=message_id,
                                                                 subagent_run_id=sub)
            out += [ReasoningStartEvent(message_id=message_id, subagent_run_id=sub),
                    ReasoningMessageStartEvent(message_id=message_id, subagent_run_id=sub)]
        if text:
            out.append(Delta("REASONING_MESSAGE_CONTENT", "messageId", message_id, text, sub))
        return out

    def _message_end(self, event: dict[str, Any]) -> list[AgUiEvent]:
        """Close what the reply left open (its text, reasoning, calls cut short); a reply
        cut off by a lost worker stays open for the resumed attempt."""
        loop = loop_of(event)
        message_id = self._message.pop(loop, None)
        if message_id is None:
            return []
        if is_lost_reply(event):
            calls = {key[1] for key, closing in self._open.items() if key[0] == "call"
                     and getattr(closing, "subagent_run_id", None) is None}
            self._lost = (Rewind(self._shown.texts()), message_id, calls)
            return []
        out = self._settle() if loop[0] == 0 else []
        return [*out, *self._close_message(message_id)]

    def _close_message(self, message_id: str) -> list[AgUiEvent]:
        """Close a reply's text and reasoning."""
        ids = (message_id, f"{message_id}-reasoning")
        return self._close(lambda key: key[1] in ids)

    def _close(self, which: Any) -> list[AgUiEvent]:
        keys = [key for key in self._open if which(key)]
        return [self._open.pop(key) for key in reversed(keys)]

    def _announce(self, call_id: str, args: dict[str, Any], sub: str | None) -> list[AgUiEvent]:
        """START/ARGS/END for a call that never streamed (it appears at its execution)."""
        if call_id in self._announced:
            return []
        self._announced.add(call_id)
        name = self._calls.get(call_id, ("tool", None))[0]
        return [ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name,
                                   subagent_run_id=sub),
                ToolCallArgsEvent(tool_call_id=call_id, delta=orjson.dumps(args).decode(),
                                  subagent_run_id=sub),
                ToolCallEndEvent(tool_call_id=call_id, subagent_run_id=sub)]

    def _tool_end(self, event: dict[str, Any], sub: str | None) -> list[AgUiEvent]:
        call_id = event["tool_call_id"]
        if lost_tool_end(event):  # the new worker runs the call again: one result
            self._held[call_id] = event
            return []
        self._held.pop(call_id, None)
        return self._tool_result(event, sub)

    def _tool_result(self, event: dict[str, Any], sub: str | None) -> list[AgUiEvent]:
        call_id = event["tool_call_id"]
        out = self._announce(call_id, {}, sub)
        if call_id in self._answered:  # the client's own tool message has it
            return out
        text = result_text(event["result"].get("content") or [])
        return [*out, ToolCallResultEvent(message_id=result_message_id(call_id),
                                          tool_call_id=call_id, content=text, role="tool",
                                          subagent_run_id=sub)]

    def _run_end(self, event: dict[str, Any]) -> list[AgUiEvent]:
        out = [*self._settle(), *self._unheld(), *self._close(lambda _: True)]
        reason, run_id = event["stop_reason"], event["run_id"]
        if reason in ("error", "output_invalid"):
            return [*out, RunErrorEvent(message=event.get("error") or "the run failed",
                                        code="run_failed" if reason == "error" else reason)]
        if reason == "aborted":
            return [*out, RunFinishedEvent(thread_id=self.thread_id, run_id=run_id,
                                           outcome=RunFinishedCancelledOutcome())]
        if "output" in event:  # structured output: into the agent's state, and the result
            out.append(_delta([{"op": "add", "path": "/output", "value": event["output"]}]))
        return [*out, RunFinishedEvent(thread_id=self.thread_id, run_id=run_id,
                                       result=event.get("output", final_text(event)))]


def _delta(ops: list[dict[str, Any]]) -> StateDeltaEvent:
    """STATE_DELTA of JSON Patch operations (the protocol's typed operations, from JSON)."""
    return StateDeltaEvent.model_validate({"type": "STATE_DELTA", "delta": ops})
