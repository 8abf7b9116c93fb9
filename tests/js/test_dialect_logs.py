"""Logs the live tests cannot easily produce (a worker crash mid-reply, a steering message, a
reply cut off mid tool call), projected by each dialect and read by the real clients' parsers
(``replay_frames.mjs``): the AI SDK's chunk schema and message builder, AG-UI's verifier."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from ag_ui.core import ReasoningMessageContentEvent, TextMessageContentEvent, ToolCallArgsEvent
from ag_ui.encoder import EventEncoder

from app.dialects.ag_ui.projector import AgUiProjector, Delta
from app.dialects.ai_sdk.projector import UIMessageProjector
from app.dialects.tail import Projector
from app.engine.events import (
    AgentEnd,
    AgentStart,
    Event,
    MessageEnd,
    MessageStart,
    MessageUpdate,
    RunCreated,
    RunResumed,
    ToolExecutionEnd,
    ToolExecutionStart,
    TurnEnd,
    TurnStart,
    encode_event,
)
from app.engine.resume import lost_reply
from providers.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tests.js.node_client import run_node

# a few Node processes per test, on a machine shared with other suites (load 10-16 measured)
pytestmark = pytest.mark.timeout(120)

RUN = "run_test"


def log(*events: Event) -> list[dict[str, Any]]:
    """The stored JSON of ``events``, as a subscriber reads it."""
    return [orjson.loads(encode_event(e, seq=i, run_id=RUN, ts="2026-01-01T00:00:00.000Z"))
            for i, e in enumerate(events, start=1)]


def body(projector: Projector, events: list[dict[str, Any]]) -> str:
    frames = [f for e in events for f in projector.feed(e)] + projector.finish()
    return b"".join(frames).decode()


def text(delta: str, index: int = 0) -> MessageUpdate:
    return MessageUpdate(delta={"kind": "text_delta", "content_index": index, "text": delta})


def call_delta(kind: str, raw: str = "", call_id: str = "c1") -> MessageUpdate:
    delta: dict[str, Any] = {"kind": kind, "content_index": 1, "tool_call_id": call_id,
                             "tool_name": "weather"}
    if raw:
        delta["text"] = raw
    if kind == "toolcall_end":
        delta["arguments"] = orjson.loads(raw)
    return MessageUpdate(delta=delta)


def reply(content: list[Any], stop: str = "stop") -> AssistantMessage:
    return AssistantMessage(content=content, stop_reason=stop)  # type: ignore[arg-type]


def crashed(resumed_text: str) -> list[dict[str, Any]]:
    """A worker lost mid-reply, as the runner logs it (``app.engine.resume``): the cut-off reply's
    ``message_end`` says so, ``run_resumed``, and the resumed attempt makes the same turn's
    model call again, here streaming ``resumed_text`` and another call."""
    return log(*_lost_start(), *_resumed(resumed_text))


def _lost_start() -> list[Event]:
    return [RunCreated(model="fake:test"), AgentStart(model="fake:test", tools=["weather"]),
            TurnStart(turn=1), MessageStart(message=reply([])), text("Let me "),
            call_delta("toolcall_start"), call_delta("toolcall_delta", '{"ci'),
            MessageEnd(message=lost_reply()), RunResumed(worker="w2", attempt=2)]


def _resumed(resumed_text: str) -> list[Event]:
    return [
        MessageStart(message=reply([])), text(resumed_text[:4]), text(resumed_text[4:]),
        call_delta("toolcall_start", call_id="c2"),
        call_delta("toolcall_delta", '{"city": "Oslo"}', "c2"),
        call_delta("toolcall_end", '{"city": "Oslo"}', "c2"),
        MessageEnd(message=reply([TextContent(text="Let me check."),
                              ToolCall(id="c2", name="weather", arguments={"city": "Oslo"})],
                             "tool_use")),
        ToolExecutionStart(tool_call_id="c2", tool_name="weather", args={"city": "Oslo"}),
        ToolExecutionEnd(tool_call_id="c2", tool_name="weather", is_error=False,
                     result={"content": [{"type": "text", "text": "snow"}], "details": None}),
        TurnEnd(message=reply([]), tool_results=[]),
        TurnStart(turn=2), MessageStart(message=UserMessage(content="in Celsius")),
        MessageStart(message=reply([])), text("Snow, -3."), MessageEnd(message=reply([])),
        TurnEnd(message=reply([]), tool_results=[]),
        AgentEnd(stop_reason="stop", error=None, usage=Usage(), messages=[
        reply([TextContent(text="Snow, -3.")]),
        ToolResultMessage(tool_call_id="c2", tool_name="weather", content=[])])]


CRASHED = crashed("Let me check.")


async def test_the_ai_sdk_reads_a_log_with_a_crash_and_a_steering_message() -> None:
    out = await run_node("replay_frames.mjs", {"dialect": "ai-sdk",
                                               "body": body(UIMessageProjector(), CRASHED)},
                         package="ai")
    assert out["errors"] == []
    parts = out["message"]["parts"]
    kinds = [p["type"] for p in parts]
    assert kinds == ["step-start", "text", "tool-weather", "tool-weather",
                     "step-start", "steering-message", "text"]
    # the resumed attempt's text went on in the part the lost one had begun, once
    assert parts[1]["text"] == "Let me check." and parts[1]["state"] == "done"
    assert parts[2]["state"] == "output-error"  # the call the crash cut off
    assert parts[3]["state"] == "output-available" and parts[3]["input"] == {"city": "Oslo"}
    assert parts[5]["parts"] == [{"type": "text", "text": "in Celsius"}]
    assert parts[-1]["text"] == "Snow, -3."


async def test_a_steer_taken_at_the_takeover_does_not_split_the_reply() -> None:
    steered = log(*_lost_start(), MessageStart(message=UserMessage(content="faster")),
                  MessageEnd(message=UserMessage(content="faster")), *_resumed("Let me check."))
    ai = await run_node("replay_frames.mjs", {"dialect": "ai-sdk", "body": body(
        UIMessageProjector(), steered)}, package="ai")
    assert ai["errors"] == []
    texts = [p["text"] for p in ai["message"]["parts"] if p["type"] == "text"]
    assert texts == ["Let me check.", "Snow, -3."]
    ag_ui = await run_node("replay_frames.mjs", {"dialect": "ag-ui", "body": body(
        AgUiProjector("t1"), steered)}, package="@ag-ui/client")
    assert ag_ui["errors"] == []
    said = [m["content"] for m in ag_ui["messages"] if m["role"] == "assistant"]
    assert said == ["Let me check.", "Snow, -3."]


async def test_a_call_streamed_again_with_other_arguments() -> None:
    """The same call id, other arguments: the AI SDK restarts the call's input; AG-UI cannot
    and keeps what it showed, marking it superseded; one result either way."""
    again = log(*_lost_start(), MessageStart(message=reply([])), text("Let me "),
                call_delta("toolcall_start"), call_delta("toolcall_delta", '{"town": "Oslo"}'),
                call_delta("toolcall_end", '{"town": "Oslo"}'),
                MessageEnd(message=reply([], "tool_use")),
                ToolExecutionStart(tool_call_id="c1", tool_name="weather", args={"town": "Oslo"}),
                ToolExecutionEnd(tool_call_id="c1", tool_name="weather", is_error=False, result={
                    "content": [{"type": "text", "text": "snow"}], "details": None}),
                TurnEnd(message=reply([]), tool_results=[]),
                AgentEnd(stop_reason="stop", error=None, usage=Usage(), messages=[]))
    ai = await run_node("replay_frames.mjs", {"dialect": "ai-sdk", "body": body(
        UIMessageProjector(), again)}, package="ai")
    assert ai["errors"] == []
    tools = [p for p in ai["message"]["parts"] if p["type"] == "tool-weather"]
    assert [(t["input"], t["state"]) for t in tools] == [({"town": "Oslo"}, "output-available")]
    ag_ui = await run_node("replay_frames.mjs", {"dialect": "ag-ui", "body": body(
        AgUiProjector("t1"), again)}, package="@ag-ui/client")
    assert ag_ui["errors"] == []
    superseded = [e["value"] for e in ag_ui["events"] if e.get("name") == "agentloop.superseded"]
    assert [v["toolCallId"] for v in superseded] == ["c1"]
    calls = [c for m in ag_ui["messages"] for c in m.get("toolCalls") or []]
    assert [(c["id"], c["function"]["arguments"]) for c in calls] == [("c1", '{"ci')]
    results = [m["content"] for m in ag_ui["messages"] if m["role"] == "tool"]
    assert results == ["snow"]


async def test_a_resumed_reply_that_says_something_else_supersedes_the_shown_text() -> None:
    out = await run_node("replay_frames.mjs", {"dialect": "ai-sdk", "body": body(
        UIMessageProjector(), crashed("Let us see."))}, package="ai")
    assert out["errors"] == []
    texts = [p for p in out["message"]["parts"] if p["type"] == "text"]
    assert [(t["text"], t.get("providerMetadata")) for t in texts] == [
        ("Let me ", {"agentloop": {"superseded": True}}), ("Let us see.", None),
        ("Snow, -3.", None)]
    ag_ui = await run_node("replay_frames.mjs", {"dialect": "ag-ui", "body": body(
        AgUiProjector("t1"), crashed("Let us see."))}, package="@ag-ui/client")
    assert ag_ui["errors"] == []
    superseded = [e for e in ag_ui["events"] if e.get("name") == "agentloop.superseded"]
    assert len(superseded) == 1
    said = [m["content"] for m in ag_ui["messages"] if m["role"] == "assistant" and
            m["id"] != superseded[0]["value"]["messageId"] and m.get("content")]
    assert said == ["Let us see.", "Snow, -3."]


async def test_ag_ui_verifies_a_log_with_a_crash_and_a_steering_message() -> None:
    out = await run_node("replay_frames.mjs", {"dialect": "ag-ui",
                                               "body": body(AgUiProjector("t1"), CRASHED)},
                         package="@ag-ui/client")
    assert out["errors"] == []
    kinds = [e["type"] for e in out["events"]]
    crash = kinds.index("TOOL_CALL_ARGS") + 1  # the resumed attempt goes on in the same message
    assert kinds[crash:crash + 2] == ["TEXT_MESSAGE_CONTENT", "TOOL_CALL_START"]
    assert out["events"][crash]["delta"] == "check."
    user = [e for e in out["events"] if e.get("role") == "user"]
    assert len(user) == 1 and kinds[-1] == "RUN_FINISHED"
    assert out["events"][-1]["result"] == "Snow, -3."
    assert kinds.count("STEP_STARTED") == kinds.count("STEP_FINISHED") == 2
    replies = [m for m in out["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in replies] == ["Let me check.", "Snow, -3."]
    assert [c["id"] for c in replies[0]["toolCalls"]] == ["c1", "c2"]
    results = {m["toolCallId"]: m["content"] for m in out["messages"] if m["role"] == "tool"}
    assert results == {"c1": "the worker stopped before the call was complete", "c2": "snow"}


async def test_a_reply_cut_off_mid_call_and_an_error_end_stay_well_formed() -> None:
    cut = log(RunCreated(model="fake:test"), AgentStart(model="fake:test", tools=[]),
              TurnStart(turn=1), MessageStart(message=reply([])), text("Hmm"),
              call_delta("toolcall_start"), call_delta("toolcall_delta", '{"ci'),
              MessageEnd(message=reply([], "length")),
              ToolExecutionStart(tool_call_id="c1", tool_name="weather", args={}),
              ToolExecutionEnd(tool_call_id="c1", tool_name="weather", is_error=True,
                               result={"content": [{"type": "text", "text": "cut off"}]}),
              TurnEnd(message=reply([]), tool_results=[]),
              AgentEnd(stop_reason="error", error="provider down", usage=Usage(), messages=[]))
    ag_ui = await run_node("replay_frames.mjs", {"dialect": "ag-ui",
                                                 "body": body(AgUiProjector("t1"), cut)},
                           package="@ag-ui/client")
    assert ag_ui["errors"] == [] and ag_ui["events"][-1]["type"] == "RUN_ERROR"
    ai = await run_node("replay_frames.mjs", {"dialect": "ai-sdk",
                                              "body": body(UIMessageProjector(), cut)},
                        package="ai")
    assert ai["errors"] == ["provider down"]
    tool = ai["message"]["parts"][2]
    assert tool["state"] == "output-error" and tool["errorText"] == "cut off"


def test_the_fast_token_events_encode_as_the_official_encoder_does() -> None:
    encoder = EventEncoder()
    for sub, ts in ((None, None), ("sub-1", 1767225600000)):
        cases = [(Delta("TEXT_MESSAGE_CONTENT", "messageId", "m1", "hé\n\"x\"", sub),
                  TextMessageContentEvent(message_id="m1", delta="hé\n\"x\"",
                                          subagent_run_id=sub, timestamp=ts)),
                 (Delta("REASONING_MESSAGE_CONTENT", "messageId", "m1", "hmm", sub),
                  ReasoningMessageContentEvent(message_id="m1", delta="hmm",
                                               subagent_run_id=sub, timestamp=ts)),
                 (Delta("TOOL_CALL_ARGS", "toolCallId", "c1", '{"a":', sub),
                  ToolCallArgsEvent(tool_call_id="c1", delta='{"a":', subagent_run_id=sub,
                                    timestamp=ts))]
        for fast, official in cases:
            wire = encoder.encode(official)
            assert wire.startswith("data: ") and wire.endswith("\n\n")
            assert orjson.loads(fast.json(ts)) == orjson.loads(wire[6:])
