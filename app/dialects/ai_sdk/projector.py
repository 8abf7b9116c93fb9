"""The Vercel AI SDK's UI message stream (``ai`` 7.x), projected from a run's stored events.

One run is one assistant ``UIMessage`` (its id is the run id), one ``start-step``/``finish-step``
per turn. Chunk shapes follow the SDK's ``uiMessageChunkSchema`` (``ai/dist``,
``src/ui-message-stream/ui-message-chunks.ts``); the body is SSE, one ``data:`` JSON chunk per
block, closed by ``data: [DONE]``, with the ``x-vercel-ai-ui-message-stream: v1`` header.

Native event → chunks (depth 0):

    run_created            start {messageId: run id, messageMetadata: {run_id, events_url}}
    turn_start / turn_end  start-step / finish-step
    message_update         text-*, reasoning-*, tool-input-start/-delta/-available
    message_start (user)   steering-message, for a steering or follow-up message the loop took
    tool_execution_update  tool-output-available {preliminary: true, output: partial_result}
    tool_execution_end     tool-output-available {output: result} or tool-output-error
    agent_end              [error] finish {finishReason, messageMetadata} | abort, then [DONE]
    approval_requested     tool-approval-request {approvalId: tool call id, toolCallId}
    client_tool_requested  (tool-input-available: the SDK's client-side tool, no execute)
    approval_decided       tool-output-denied for a denial (its error result is not shown)
    the run parks on them  [reset-step and the step again without its server picks that have
                           not run: ``step_ledger``] finish {finishReason: tool-calls,
                           messageMetadata.stop_reason: requires_action}, then [DONE]: the SDK
                           answers in its next request
    run_resumed            nothing: the parts of a reply a lost worker was streaming stay
                           open and the resumed attempt's re-stream goes on in them with
                           only what the client lacks (``app.dialects.takeover``; a diverging
                           part ends with providerMetadata.agentloop.superseded)

Events of a nested loop (depth > 0) are not parts of the message (except a nested pick that
waits for a person: its request, answer and end are the parts above): they become preliminary
outputs of the depth-0 tool call that runs them (``nested.NestedTrace``), the SDK's pattern for
sub-agents, replaced by the tool's own result when it ends.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.dialects.ai_sdk.step_ledger import StepLedger
from app.dialects.nested import NestedTrace, result_text
from app.dialects.takeover import Key, Rewind, Shown, is_lost_reply, lost_tool_end
from app.engine.json_patch import PatchError, apply_patch

HEADERS = {"x-vercel-ai-ui-message-stream": "v1", "x-accel-buffering": "no",
           "cache-control": "no-cache"}
"""The SDK's ``UI_MESSAGE_STREAM_HEADERS`` (beyond the media type)."""
DONE = b"data: [DONE]\n\n"
SUPERSEDED = {"agentloop": {"superseded": True}}
"""``providerMetadata`` of a text or reasoning part a lost worker streamed and the resumed
attempt did not repeat (``app.dialects.takeover``): a UI may hide it."""
_CUT_OFF = "the worker stopped before the call was complete"
_FINISH = {"stop": "stop", "error": "error", "output_invalid": "error", "budget": "length"}
"""Our stop reasons the SDK names (``budget``, the run's token budget spent, is ``length``);
``max_iterations`` (the round cap) is ``other``."""


def chunk_frame(seq: int, chunk: dict[str, Any]) -> bytes:
    """One SSE block: ``id: <seq of the native event>`` and the chunk as ``data:``."""
    return b"id: %d\ndata: %s\n\n" % (seq, orjson.dumps(chunk))


class UIMessageProjector:
    """Native events (in log order) → UI message stream frames; see the module docstring."""

    def __init__(self, client_tools: frozenset[str] = frozenset(), *,
                 continues_after: int | None = None) -> None:
        self._client_tools = client_tools
        self._ledger = StepLedger()
        self._continues_after = continues_after
        """An answer's stream: the response before it ended at the park, after this seq."""
        """The run's client tools: their parts alone lack ``providerExecuted`` (the page runs
        them, so the SDK calls ``onToolCall`` for them only)."""
        self._model = ""
        self._state: Any = None  # the run's shared state as its events built it
        self._steps: list[dict[str, Any]] = []  # per-step metadata: turn, model, usage
        self._seq = 0
        self._turn = 0
        self._open: dict[int, tuple[str, str]] = {}  # content_index → (kind, part id)
        self._announced: set[str] = set()  # tool calls whose input is available
        self._streaming: dict[str, str] = {}  # tool calls whose input is streaming → tool
        self._assistant_seen = False
        self._nested = NestedTrace()
        self._done = False
        self._waiting: set[str] = set()  # picks handed to the client, not yet answered
        self._denied: set[str] = set()
        self._lifted: set[str] = set()  # nested picks shown as parts of their own
        self._run_id = ""
        self._shown = Shown()  # what the open parts of the reply hold
        self._lost: tuple[Rewind, set[str]] | None = None  # a reply cut off by a lost worker
        self._rewind: Rewind | None = None  # ... being streamed again by the resumed attempt
        self._cut: set[str] = set()  # its calls the resumed attempt has not streamed again
        self._held: dict[str, dict[str, Any]] = {}  # a lost worker's tool ends, run again

    def feed(self, event: dict[str, Any]) -> list[bytes]:
        """The frames of one event."""
        return [self._frame(c) for c in self.chunks(event)]

    def chunks(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks of one event (``feed`` without the framing)."""
        self._seq = int(event.get("seq", self._seq))
        if self._continues_after is not None and self._seq > self._continues_after:
            self._continues_after = None
            self._ledger.reset(self._waiting)  # as the response that ended at the park did
        out = self._nested_event(event) if event.get("depth") else self._chunks(event)
        started = event["tool_call_id"] if event.get("type") == "tool_execution_start" \
            and not event.get("depth") else None
        out = self._ledger.shown(started, out)
        self._ledger.record(out)
        return out

    def finish(self) -> list[bytes]:
        """``[DONE]`` (the SDK's end of stream)."""
        return [DONE]

    def waits_on_client(self) -> bool:
        """Whether an approval or a client tool's result is up to the client."""
        return bool(self._waiting)

    def pause(self) -> list[bytes]:
        """The end of this response while the run waits (the SDK's tool-call finish)."""
        return [self._frame(c) for c in self.pause_chunks()]

    def pause_chunks(self) -> list[dict[str, Any]]:
        """``pause`` without the framing."""
        meta = {"run_id": self._run_id, "stop_reason": "requires_action",
                "usage": self._usage(), "model": self._model}
        closing = [*self._settle(), *self._unheld(), *self._close_blocks()]
        self._ledger.record(closing)
        return [*closing, *self._ledger.reset(self._waiting),  # left answerable: step_ledger
                {"type": "finish", "finishReason": "tool-calls", "messageMetadata": meta}]

    def _frame(self, chunk: dict[str, Any]) -> bytes:
        return chunk_frame(self._seq, chunk)

    def _chunks(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        kind = event.get("type")
        if kind in ("approval_requested", "client_tool_requested", "approval_decided"):
            return self._hitl(event)
        if kind == "run_created":
            self._run_id, self._model = event["run_id"], str(event.get("model") or "")
            meta = {"run_id": event["run_id"], "events_url": f"/runs/{event['run_id']}/events",
                    "model": self._model}
            return [{"type": "start", "messageId": event["run_id"], "messageMetadata": meta}]
        if kind == "run_resumed":
            return self._resumed()
        if kind == "turn_start":
            self._turn = int(event["turn"])
            return [{"type": "start-step"}]
        if kind == "turn_end":
            return self._step_end(event)
        if kind == "message_start":
            return self._message_start(event["message"])
        if kind == "message_update":
            return self._delta(event["delta"])
        if kind == "message_end":
            return self._message_end(event)
        if kind == "tool_execution_start":
            return self._announce(event["tool_call_id"], event["tool_name"], event["args"])
        if kind == "tool_execution_update":
            return [{"type": "tool-output-available", "toolCallId": event["tool_call_id"],
                     "output": event["partial_result"], "preliminary": True,
                     **self._server(str(event.get("tool_name")))}]
        if kind == "tool_execution_end":
            return self._tool_end(event)
        if kind == "agent_end":
            return self._end(event)
        if kind in ("data", "state_snapshot", "state_delta"):
            return self._data(event)
        return []  # run_resumed, agent_start, queue notices: nothing to show

    def _data(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """A tool's data: a ``data-<name>`` part (replaced in place by a later one of the same
        id); the shared state: the ``data-state`` part (id ``state``), whole each time."""
        kind = event["type"]
        if kind == "data":
            part = {"type": f"data-{event['name']}", "data": event.get("data")}
            return [{**part, "id": event["id"]} if event.get("id") is not None else part]
        if kind == "state_snapshot":
            self._state = event["state"]
        else:
            try:
                self._state = apply_patch(self._state or {}, event["delta"])
            except PatchError:
                return []
        return [{"type": "data-state", "id": "state", "data": self._state}]

    def _step_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """``finish-step``, and the step's model and usage added to the message metadata
        (``steps``: one entry per step so far; ``usage``: their sum)."""
        reply = event.get("message") or {}
        step = {"turn": self._turn, "model": reply.get("model") or self._model,
                "usage": reply.get("usage") or {}}
        self._steps.append(step)
        return [{"type": "finish-step", **step},
                {"type": "message-metadata", "messageMetadata": {
                    "steps": list(self._steps), "usage": self._usage()}}]

    def _usage(self) -> dict[str, Any]:
        """The steps' usage summed, field by field (numbers only)."""
        total: dict[str, Any] = {}
        for step in self._steps:
            for key, value in step["usage"].items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    total[key] = total.get(key, 0) + value
                elif isinstance(value, dict):  # e.g. cost {input, output, total}
                    inner = total.setdefault(key, {})
                    for k, v in value.items():
                        if isinstance(v, int | float) and not isinstance(v, bool):
                            inner[k] = inner.get(k, 0) + v
        return total

    def _server(self, name: str) -> dict[str, Any]:
        """``providerExecuted`` for a server tool's chunks: the service runs it, not the page
        (a client tool's chunks have none)."""
        return {} if name in self._client_tools else {"providerExecuted": True}

    def _message_start(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """A user message after the first reply is a steering or follow-up message."""
        role = message.get("role")
        if role == "assistant":
            self._assistant_seen = True
            if self._lost is not None:  # the resumed attempt streams the lost reply again
                (self._rewind, self._cut), self._lost = self._lost, None
            else:
                self._open = {}
                self._shown.clear()
            return []
        if role != "user" or not self._assistant_seen:
            return []
        content = message["content"]
        text = content if isinstance(content, str) else result_text(content)
        return [{"type": "steering-message", "id": f"steer-{self._seq}",
                 "parts": [{"type": "text", "text": text}]}]

    def _delta(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        kind, index = delta["kind"], int(delta["content_index"])
        if kind in ("text_delta", "thinking_delta"):
            return self._block_delta("text" if kind == "text_delta" else "reasoning", index,
                                     delta["text"])
        call_id = delta["tool_call_id"]
        if kind == "toolcall_start":  # a call streamed again starts over in the SDK's part
            self._cut.discard(call_id)
            self._streaming[call_id] = delta["tool_name"]
            return [{"type": "tool-input-start", "toolCallId": call_id,
                     "toolName": delta["tool_name"], **self._server(delta["tool_name"])}]
        if kind == "toolcall_delta":
            return [{"type": "tool-input-delta", "toolCallId": call_id,
                     "inputTextDelta": delta["text"]}]
        return self._announce(call_id, delta["tool_name"], delta.get("arguments") or {})

    def _block_delta(self, kind: str, index: int, text: str) -> list[dict[str, Any]]:
        key = (kind, str(index))
        if self._rewind is not None and self._rewind.pending(key):
            new = self._rewind.take(key, text)
            if new is None:
                return self._diverged(key, self._rewind.repeated(key) + text)
            if not new:
                return []  # the client has this text from the lost worker
            text = new
        out: list[dict[str, Any]] = []
        if index not in self._open:
            part_id = f"{kind}-{self._turn}-{index}"
            self._open[index] = (kind, part_id)
            out.append({"type": f"{kind}-start", "id": part_id})
        out.append({"type": f"{kind}-delta", "id": self._open[index][1], "delta": text})
        self._shown.add(key, text)
        return out

    def _message_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The reply's end closes its parts; a reply cut off by a lost worker keeps them
        open for the resumed attempt (``app.dialects.takeover``)."""
        if is_lost_reply(event):
            self._lost = (Rewind(self._shown.texts()), set(self._streaming))
            return []
        if event["message"].get("role") != "assistant":  # a steer taken before the re-stream
            return [] if self._lost is not None else self._close_blocks()
        return [*self._settle(), *self._close_blocks()]

    def _diverged(self, key: Key, text: str) -> list[dict[str, Any]]:
        """The resumed attempt's block says something else than the lost one showed: that
        part ends, superseded, and ``text`` starts a new one."""
        kind, index = key[0], int(key[1])
        out: list[dict[str, Any]] = []
        old = self._open.pop(index, None)
        if old is not None:
            out.append({"type": f"{kind}-end", "id": old[1], "providerMetadata": SUPERSEDED})
        if not text:
            return out
        part_id = f"{kind}-{self._turn}-{index}-{self._seq}"
        self._open[index] = (kind, part_id)
        self._shown.reset(key, text)
        return [*out, {"type": f"{kind}-start", "id": part_id},
                {"type": f"{kind}-delta", "id": part_id, "delta": text}]

    def _settle(self) -> list[dict[str, Any]]:
        """Once the resumed reply is over (or the run, before it came): parts it did not
        repeat to the end are superseded, calls it did not stream again were cut off."""
        out: list[dict[str, Any]] = []
        if self._lost is not None:  # no attempt streamed the reply again
            self._cut, self._lost = self._lost[1], None
        elif self._rewind is not None:
            for key in self._rewind.unfinished():
                out += self._diverged(key, self._rewind.repeated(key))
        self._rewind = None
        for call_id in sorted(self._cut):
            name = self._streaming.pop(call_id, None)
            if name is not None:
                out.append({"type": "tool-input-error", "toolCallId": call_id, "toolName": name,
                            "input": {}, "errorText": _CUT_OFF})
        self._cut = set()
        return out

    def _close_blocks(self) -> list[dict[str, Any]]:
        out = [{"type": f"{kind}-end", "id": part_id} for kind, part_id in self._open.values()]
        self._open = {}
        return out

    def _announce(self, call_id: str, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        """``tool-input-available`` once per call (a call that never streamed gets it at its
        execution start)."""
        if call_id in self._announced:
            return []
        self._announced.add(call_id)
        self._streaming.pop(call_id, None)
        return [{"type": "tool-input-available", "toolCallId": call_id, "toolName": name,
                 "input": args, **self._server(name)}]

    def _hitl(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        call_id, kind = event["tool_call_id"], event["type"]
        if kind == "approval_decided":
            self._waiting.discard(call_id)
            if event["decision"] != "deny":
                return []
            self._denied.add(call_id)
            return [{"type": "tool-output-denied", "toolCallId": call_id}]
        self._waiting.add(call_id)
        out = self._announce(call_id, event["tool_name"], event["args"])
        if kind == "approval_requested":
            out.append({"type": "tool-approval-request", "approvalId": call_id,
                        "toolCallId": call_id})
        return out

    def _resumed(self) -> list[dict[str, Any]]:
        """A reply the lost worker was streaming stays open for the resumed attempt; else
        close what the crashed worker left open."""
        if self._lost is not None:
            return []
        cut = [{"type": "tool-input-error", "toolCallId": call_id, "toolName": name,
                "input": {}, "errorText": _CUT_OFF} for call_id, name in self._streaming.items()]
        self._streaming = {}
        return [*self._close_blocks(), *cut]

    def _tool_end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = event["tool_call_id"]
        if lost_tool_end(event):  # the part stays running: the new worker runs the call
            self._held[call_id] = event
            return []
        self._held.pop(call_id, None)
        return self._tool_result(event)

    def _tool_result(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        call_id = event["tool_call_id"]
        out = self._announce(call_id, event["tool_name"], {})
        result = event["result"]
        if call_id in self._denied:
            return out
        ran = self._server(event["tool_name"])
        if event["is_error"]:
            text = result_text(result.get("content") or []) or "tool failed"
            return [*out, {"type": "tool-output-error", "toolCallId": call_id, "errorText": text,
                           **ran}]
        if event["tool_name"] in self._client_tools:  # what the page sent, as the model got it
            result = result_text(result.get("content") or [])
        return [*out, {"type": "tool-output-available", "toolCallId": call_id, "output": result,
                       **ran}]

    def _end(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        out = [*self._settle(), *self._unheld(), *self._close_blocks()]
        reason = event["stop_reason"]
        if reason == "aborted":
            return [*out, {"type": "abort", "reason": event.get("error") or "cancelled"}]
        meta = {"run_id": event["run_id"], "stop_reason": reason, "usage": event["usage"],
                "model": self._model}
        if reason in ("error", "output_invalid"):  # useChat stops reading at the error chunk:
            out += [{"type": "message-metadata", "messageMetadata": meta},  # metadata first
                    {"type": "error", "errorText": event.get("error") or "the run failed"}]
        if "output" in event:  # structured output: a data part, and in the metadata
            out.append({"type": "data-output", "id": "output", "data": event["output"]})
            meta["output"] = event["output"]
        return [*out, {"type": "finish", "finishReason": _FINISH.get(reason, "other"),
                       "messageMetadata": meta}]

    def _nested_event(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """A nested loop's event: a preliminary output of the depth-0 call running it; a
        nested pick waiting for a person is lifted to a tool part of its own (approval request
        or client tool, then its output), so the page answers it as any other."""
        out = self._nested_chunks(event)
        kind, call_id = event.get("type"), event.get("tool_call_id")
        if kind == "data":  # a nested tool's data is the page's all the same
            return [*out, *self._data(event)]
        if kind in ("approval_requested", "client_tool_requested", "approval_decided"):
            self._lifted.add(str(call_id))
            return [*out, *self._hitl(event)]
        if kind == "tool_execution_end" and call_id in self._lifted:
            return [*out, *self._tool_end(event)]
        return out

    def _unheld(self) -> list[dict[str, Any]]:
        """The held ends of calls that were not run again (the run ended first)."""
        held, self._held = self._held, {}
        return [c for event in held.values() for c in self._tool_result(event)]

    def _nested_chunks(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        update = self._nested.feed(event)
        if update is None:
            return []
        call_id, output = update
        return [{"type": "tool-output-available", "toolCallId": call_id, "output": output,
                 "preliminary": True}]
