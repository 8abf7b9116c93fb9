"""Loop edges (issue 9): reused tool-call ids, unfinished calls, forced deferred tools, a tool
that raises ``CancelledError``, and the run deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app import runtime
from app.engine import LoopConfig
from app.engine.events import Event
from app.engine.history import repair, unanswered_calls
from app.engine.streaming import Deadline
from providers import fake
from providers.base import ForcedTool, ModelRequest
from providers.events import (
    DoneEvent,
    ProviderEvent,
    StartEvent,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from providers.fake import FakeProvider, Step
from providers.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.loop.helpers import Run, drive, registry_with
from tool_registry import function

ran: list[tuple[int, int]] = []


@function(register=False)
def plus(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    ran.append((a, b))
    return a + b


def calls(*items: tuple[str, str]) -> Step:
    """A reply whose calls are ``(id, raw arguments text)``, each closed, all to ``plus``."""
    events: list[ProviderEvent] = [StartEvent()]
    for i, (call_id, raw) in enumerate(items):
        events += [ToolCallStart(i, call_id, "plus"), ToolCallDelta(i, raw), ToolCallEnd(i)]
    return Step([*events, DoneEvent("tool_use")])


def pairs(messages: list[Message]) -> list[tuple[str, str]]:
    """(call id, result text) for every result, checking each call has exactly one result."""
    call_ids = [c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls()]
    results = [m for m in messages if isinstance(m, ToolResultMessage)]
    assert len(set(call_ids)) == len(call_ids), f"ids not unique: {call_ids}"
    assert sorted(r.tool_call_id for r in results) == sorted(call_ids)
    return [(r.tool_call_id, "".join(getattr(c, "text", "") for c in r.content))
            for r in results]


async def run_plus(script: list[Step], **config: Any) -> Run:
    ran.clear()
    return await drive(list(script), registry=registry_with(plus),
                       config=LoopConfig(model="m", **config))


# -- 10: ids a provider reuses ---------------------------------------------------------------

async def test_a_server_that_reuses_call_1_every_round_keeps_every_result() -> None:
    run = await run_plus([calls(("call_1", '{"a": 1, "b": 2}')),
                          calls(("call_1", '{"a": 3, "b": 4}')),
                          calls(("call_1", '{"a": 5, "b": 6}')), fake.text("done")])
    last = run.sent(3)
    assert [text for _, text in pairs(last)] == ["3", "7", "11"]
    first_ids = [c.id for m in last if isinstance(m, AssistantMessage) for c in m.tool_calls()]
    assert first_ids[0] == "call_1"  # the provider's id is kept while it is unique
    assert run.outcome is not None and run.outcome.stop_reason == "stop"


async def test_an_id_repeated_inside_one_reply_only_fails_the_bad_call() -> None:
    run = await run_plus([calls(("call_1", '{"a": 1, "b": 2}'), ("call_1", '{"a": ')),
                          fake.text("done")])
    got = pairs(run.sent(1))
    assert got[0][1] == "3" and ran == [(1, 2)]
    assert got[1][1].startswith("Invalid arguments: arguments are not valid JSON")
    ends = [e for e in run.events if e.type == "tool_execution_end"]
    assert [e.is_error for e in ends] == [False, True]


async def test_events_results_and_history_carry_the_same_run_unique_id() -> None:
    run = await run_plus([calls(("call_1", '{"a": 1, "b": 2}'), ("call_1", '{"a": 2, "b": 2}')),
                          fake.text("done")])
    assert run.outcome is not None
    ids = [c.id for m in run.outcome.messages if isinstance(m, AssistantMessage)
           for c in m.tool_calls()]
    assert ids[0] == "call_1" and ids[1] != "call_1" and len(set(ids)) == 2
    deltas = {e.delta["tool_call_id"] for e in run.events if e.type == "message_update"
              and e.delta["kind"].startswith("toolcall")}
    assert deltas == set(ids)
    for kind in ("tool_execution_start", "tool_execution_end"):
        assert [e.tool_call_id for e in run.events if e.type == kind] == ids
    results = [m.tool_call_id for m in run.outcome.messages if isinstance(m, ToolResultMessage)]
    assert results == ids


async def test_ids_already_in_a_continued_history_are_not_reused() -> None:
    history: list[Message] = [
        UserMessage(content="before"),
        AssistantMessage(content=[ToolCall(id="call_1", name="plus", arguments={"a": 0, "b": 0})],
                         stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="call_1", tool_name="plus"),
        AssistantMessage(content=[], stop_reason="stop")]
    ran.clear()
    run = await drive([calls(("call_1", '{"a": 1, "b": 1}')), fake.text("done")],
                      registry=registry_with(plus), context=history)
    pairs(run.sent(1))
    assert run.outcome is not None
    new = [c.id for m in run.outcome.messages if isinstance(m, AssistantMessage)
           for c in m.tool_calls()]
    assert new and new[0] != "call_1"


def test_repair_pairs_results_within_their_own_turn() -> None:
    """A stored history whose provider reused ids (older runs, or a client's input)."""
    history: list[Message] = [UserMessage(content="go")]
    for n in range(2):
        history += [AssistantMessage(content=[ToolCall(id="call_1", name="plus"),
                                              ToolCall(id="call_1", name="plus")],
                                     stop_reason="tool_use"),
                    ToolResultMessage(tool_call_id="call_1", tool_name="plus", is_error=bool(n)),
                    ToolResultMessage(tool_call_id="call_1", tool_name="plus")]
    sent = repair(history)
    assert len([m for m in sent if isinstance(m, ToolResultMessage)]) == 4
    assert sent == history
    assert unanswered_calls(history[:6]) == [history[4].content[1]]  # type: ignore[union-attr]


def test_a_failed_reply_does_not_hide_later_results_that_reuse_its_ids() -> None:
    history: list[Message] = [
        UserMessage(content="go"),
        AssistantMessage(content=[ToolCall(id="call_1", name="plus")], stop_reason="error"),
        AssistantMessage(content=[ToolCall(id="call_1", name="plus")], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="call_1", tool_name="plus")]
    sent = repair(history)
    assert [m.role for m in sent] == ["user", "assistant", "tool_result"]
    assert not any(isinstance(m, ToolResultMessage) and m.is_error for m in sent)


# -- 11: a call the stream never closed --------------------------------------------------------

async def test_a_call_without_its_end_marker_is_an_error_result_and_never_runs() -> None:
    unfinished = Step([StartEvent(), ToolCallStart(0, "c1", "plus"),
                       ToolCallDelta(0, '{"a": 40, "b": 2'), DoneEvent("tool_use")])
    run = await run_plus([unfinished, fake.text("retrying")])
    assert ran == []
    ((_, text),) = pairs(run.sent(1))
    assert text.startswith("Invalid arguments: the reply ended before this tool call was finished")
    end = next(e for e in run.events if e.type == "tool_execution_end")
    assert end.is_error


async def test_a_closed_call_with_cut_json_is_still_an_error_and_previews_stay_partial() -> None:
    cut = Step([StartEvent(), ToolCallStart(0, "c1", "plus"), ToolCallDelta(0, '{"a": 40, '),
                ToolCallDelta(0, '"b": 2'), ToolCallEnd(0), DoneEvent("tool_use")])
    run = await run_plus([cut, fake.text("retrying")])
    assert ran == []
    previews = [e.delta.get("arguments") for e in run.events if e.type == "message_update"
                and e.delta["kind"] == "toolcall_delta"]
    assert previews == [{"a": 40}, {"a": 40, "b": 2}]  # partial JSON: previews only
    assert pairs(run.sent(1))[0][1].startswith("Invalid arguments: arguments are not valid JSON")


# -- 12: forcing a deferred tool ---------------------------------------------------------------

@function(register=False, defer=True)
def vault(key: str) -> str:
    """A deferred tool."""
    return f"opened {key}"


async def test_forcing_a_deferred_tool_loads_it_for_the_run() -> None:
    p = FakeProvider([fake.tool_calls(("vault", {"key": "k"})), fake.text("ok")])
    out = await runtime.exec("open it", provider=p, tools=[vault, plus],
                             tool_choice={"type": "function", "name": "vault"})
    assert [t.name for t in p.requests[0].tools] == ["vault", "plus"]
    assert p.requests[0].tool_choice == ForcedTool("vault")
    result = next(m for m in out.messages if isinstance(m, ToolResultMessage))
    assert not result.is_error and result.content[0].text == "opened k"  # type: ignore[union-attr]


async def test_runtime_refuses_a_forced_tool_that_is_not_on_the_menu() -> None:
    p = FakeProvider([fake.text("never")])
    try:
        await runtime.exec("x", provider=p, tools=[plus], tool_choice={"type": "function",
                                                                       "name": "nope"})
    except ValueError as exc:
        assert "nope" in str(exc) and "tool_choice" in str(exc)
    else:
        raise AssertionError("a forced tool that is not on the menu was accepted")
    assert p.requests == []


# -- 13: CancelledError raised by a tool or a provider, not by a cancel ------------------------

@function(register=False)
async def flaky() -> str:
    """Awaits work that someone else cancelled."""
    inner = asyncio.ensure_future(asyncio.sleep(10))
    inner.cancel()
    return str(await inner)


async def test_a_tool_raising_cancelled_error_is_its_own_failure_and_the_run_goes_on() -> None:
    run = await drive([fake.tool_calls(("flaky", {})), fake.text("after")],
                      registry=registry_with(flaky))
    assert run.outcome is not None and run.outcome.stop_reason == "stop"
    assert run.outcome.result == "after"
    end = next(e for e in run.events if e.type == "tool_execution_end")
    text = end.result["content"][0].text
    assert end.is_error and "raised CancelledError" in text and "was not cancelled" in text


async def test_a_provider_raising_cancelled_error_fails_the_turn_not_as_a_cancel() -> None:
    def explode(request: ModelRequest) -> Step:
        raise asyncio.CancelledError

    run = await drive([explode])
    assert run.outcome is not None and not run.abort.is_set()
    assert run.outcome.stop_reason == "error"
    assert "CancelledError" in (run.outcome.error or "")


async def test_a_real_cancel_still_ends_aborted() -> None:
    run = Run(FakeProvider([fake.tool_calls(("slow", {"seconds": 30}))]))
    task = asyncio.ensure_future(drive([], run=run, config=LoopConfig(model="m",
                                                                      tool_timeout=60)))
    await _until(lambda: "tool_execution_start" in run.types())
    run.abort.set()
    await asyncio.wait_for(task, 30)
    assert run.outcome is not None and run.outcome.stop_reason == "aborted"


# -- 15: the run deadline ----------------------------------------------------------------------

def soon(seconds: float = 0.3) -> Deadline:
    return Deadline(at=time.time() + seconds, seconds=seconds)


async def test_a_model_that_never_stops_is_stopped_at_the_deadline() -> None:
    p = FakeProvider([fake.hanging("and on and on")])
    started = time.monotonic()
    run = await drive([], run=Run(p), config=LoopConfig(model="m", deadline=soon()))
    assert time.monotonic() - started < 20
    assert run.outcome is not None and run.outcome.stop_reason == "error"
    assert run.outcome.error == soon().error() and "0.3 s" in run.outcome.error
    assert p.closed == 1  # the stream was closed
    assert not run.abort.is_set()  # the caller's event is the caller's
    assert run.types().count("agent_end") == 1


@function(register=False)
async def sleepy(seconds: float) -> str:
    """Sleeps (no timeout of its own)."""
    await asyncio.sleep(seconds)
    return "slept"


async def test_a_tool_running_at_the_deadline_is_stopped_and_the_run_fails() -> None:
    run = Run(FakeProvider([fake.tool_calls(("sleepy", {"seconds": 30}),
                                            ("plus", {"a": 1, "b": 2}))]))
    ran.clear()
    await drive([], run=run, registry=registry_with(sleepy, plus),
                config=LoopConfig(model="m", tool_timeout=60, deadline=soon()))
    assert ran == []
    assert run.outcome is not None and run.outcome.stop_reason == "error"
    ends = [e for e in run.events if e.type == "tool_execution_end"]
    assert [e.result["content"][0].text for e in ends] == [soon().tool_note()] * 2
    assert "deadline" in (run.outcome.error or "")


async def test_a_deadline_already_past_ends_a_resumed_run_before_any_model_call() -> None:
    p = FakeProvider([fake.text("never")])
    run = await drive([], run=Run(p), config=LoopConfig(
        model="m", deadline=Deadline(at=time.time() - 5, seconds=60)))
    assert p.requests == []
    assert run.outcome is not None and run.outcome.stop_reason == "error"


async def test_a_nested_exec_stops_with_its_run_at_the_deadline() -> None:
    inner = FakeProvider([fake.hanging("deep")])

    @function(register=False)
    async def delegate() -> str:
        """Runs a nested loop."""
        out = await runtime.exec("go", provider=inner, toolset="none")
        return f"inner: {out.stop_reason}"

    seen: list[Event] = []
    outer = FakeProvider([fake.tool_calls(("delegate", {}))])
    out = await runtime.exec("start", provider=outer, tools=[delegate], timeout=0.3,
                             on_event=seen.append)
    assert out.stop_reason == "error" and "deadline" in (out.error or "")
    assert inner.closed == 1


async def _until(check: Any, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
