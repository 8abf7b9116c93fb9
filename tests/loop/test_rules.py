"""The loop's rules (issue: the tool-call loop), each asserting exact events and requests."""

from __future__ import annotations

import asyncio

from app.engine import LoopConfig
from app.engine.tool_exec import CUT_OFF_BY_LENGTH, SKIPPED_FOR_STEERING
from providers import fake
from providers.base import ForcedTool, ModelRequest
from providers.events import StartEvent, TextDelta, TextStart
from providers.fake import FakeProvider
from providers.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.loop.helpers import Run, drive

ROUND = ["turn_start", "message_start", "message_update", "message_end"]
TOOL = ["tool_execution_start", "tool_execution_end", "message_start", "message_end"]


def result_texts(run: Run) -> list[tuple[str, bool]]:
    return [(m.content[0].text, m.is_error) for m in run.outcome.messages
            if isinstance(m, ToolResultMessage)]


# 1 ------------------------------------------------------------------------------------------
async def test_text_only_reply_ends_the_run_with_its_text() -> None:
    run = await drive([fake.text("hello there", chunks=2)])
    assert run.types() == ["agent_start", "turn_start", "message_start", "message_end",
                           "message_start", "message_update", "message_update", "message_end",
                           "turn_end", "agent_end"]
    assert run.outcome.stop_reason == "stop"
    assert run.outcome.result == "hello there"
    assert [m.role for m in run.outcome.messages] == ["user", "assistant"]
    assert run.sent(0) == [UserMessage(content="hi", timestamp=run.sent(0)[0].timestamp)]


async def test_tool_calls_run_and_their_results_go_back_to_the_model() -> None:
    run = await drive([fake.tool_calls(("add", {"a": 2, "b": 3})), fake.text("5")])
    assert run.types() == (["agent_start", "turn_start", "message_start", "message_end",
                            "message_start", "message_update", "message_update",
                            "message_update", "message_update", "message_end"] + TOOL
                           + ["turn_end"] + ROUND + ["turn_end", "agent_end"])
    second = run.sent(1)
    assert [m.role for m in second] == ["user", "assistant", "tool_result"]
    assert second[2].content == [TextContent(text="5")]
    assert second[2].tool_call_id == "call_1" and not second[2].is_error
    assert run.outcome.result == "5"
    end = run.events[-1]
    assert end.type == "agent_end" and end.usage.input_tokens == 20


# 2 ------------------------------------------------------------------------------------------
async def test_error_stop_reason_ends_at_once_and_leaves_follow_ups_queued() -> None:
    run = Run(FakeProvider([fake.error("rate limited upstream")]))
    run.follow_up.push("later")
    await drive([], run=run)
    assert run.types()[-2:] == ["turn_end", "agent_end"]
    assert run.outcome.stop_reason == "error"
    assert run.outcome.error == "rate limited upstream"
    assert len(run.follow_up) == 1 and len(run.provider.requests) == 1


# 3 ------------------------------------------------------------------------------------------
async def test_picks_run_in_order_and_failures_become_error_results() -> None:
    order: list[str] = []
    run = await drive([fake.tool_calls(("nope", {}), ("add", {"a": "30", "b": 1}),
                                       ("add", {"a": "x"}), ("boom", {"reason": "disk"}),
                                       ("maybe", {"n": "7"})),
                       fake.text("ok")])
    order = [e.tool_call_id for e in run.events if e.type == "tool_execution_end"]
    assert order == ["call_1", "call_2", "call_3", "call_4", "call_5"]
    texts = result_texts(run)
    assert texts[0] == ("Tool nope not found", True)
    assert texts[1] == ("31", False)
    bad, is_err = texts[2]
    assert is_err and "a:" in bad and "b: Field required" in bad and '"a": "x"' in bad
    assert texts[3] == ("boom: disk", True)
    assert texts[4] == ("n=7", False)
    assert run.outcome.stop_reason == "stop"


# 4 ------------------------------------------------------------------------------------------
class SteerAfterFirstTool(list):  # type: ignore[type-arg]
    """An event sink that queues a steering message when the first tool finishes."""

    def __init__(self, run: Run, text: str) -> None:
        super().__init__()
        self.run, self.text = run, text

    def append(self, event: object) -> None:
        super().append(event)
        if getattr(event, "type", "") == "tool_execution_end" and \
                sum(e.type == "tool_execution_end" for e in self) == 1:
            self.run.steering.push(self.text)


async def test_steering_skips_remaining_picks_and_is_injected_before_next_call() -> None:
    run = Run(FakeProvider([fake.tool_calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}),
                                            ("add", {"a": 3, "b": 3})), fake.text("noted")]))
    run.events = SteerAfterFirstTool(run, "stop adding")
    await drive([], run=run)
    texts = result_texts(run)
    assert texts == [("2", False), (SKIPPED_FOR_STEERING, True), (SKIPPED_FOR_STEERING, True)]
    starts = [e.tool_call_id for e in run.events if e.type == "tool_execution_start"]
    assert starts == ["call_1", "call_2", "call_3"]
    sent = run.sent(1)
    assert [m.role for m in sent] == ["user", "assistant", "tool_result", "tool_result",
                                      "tool_result", "user"]
    assert sent[-1].content == "stop adding"
    assert run.steering.in_flight == [] and len(run.steering) == 0


async def test_steering_queued_before_start_is_taken_and_keeps_going_after_text() -> None:
    run = Run(FakeProvider([]))
    run.steering.push("first steer")
    run.steering.push("second steer")
    await drive([fake.text("a"), fake.text("b"), fake.text("c")], run=run)
    # one-at-a-time: one steering message per poll, each keeps the loop alive after a text reply
    assert [m.content for m in run.sent(0)] == ["hi", "first steer"]
    assert run.sent(1)[-1].content == "second steer"
    assert len(run.provider.requests) == 2 and run.outcome.result == "b"


# 5, 6 ---------------------------------------------------------------------------------------
async def test_follow_ups_only_when_the_loop_would_stop() -> None:
    run = Run(FakeProvider([]))
    run.follow_up.push("and then?")
    await drive([fake.tool_calls(("add", {"a": 1, "b": 2})), fake.text("3"),
                 fake.text("done")], run=run)
    roles = [m.role for m in run.sent(1)]
    assert roles == ["user", "assistant", "tool_result"]  # not injected mid tool-loop
    assert run.sent(2)[-1].content == "and then?"
    assert run.outcome.result == "done"


async def test_all_mode_drains_the_queue_in_one_poll() -> None:
    run = Run(FakeProvider([]))
    for text in ("x", "y", "z"):
        run.follow_up.push(text)
    await drive([fake.text("a"), fake.text("b")], run=run,
                config=LoopConfig(model="m", follow_up_mode="all"))
    assert [m.content for m in run.sent(1)[-3:]] == ["x", "y", "z"]
    assert len(run.provider.requests) == 2


# 7 ------------------------------------------------------------------------------------------
async def test_max_iterations_cap_is_reported_not_success() -> None:
    calls = [fake.tool_calls(("add", {"a": 1, "b": 1}))] * 5
    for cap, rounds in ((3, 3), (1, 1), (0, 1), (-4, 1)):
        run = await drive(list(calls), config=LoopConfig(model="m", max_iterations=cap))
        assert len(run.provider.requests) == rounds, cap
        assert run.outcome.stop_reason == "max_iterations"
        assert run.events[-1].stop_reason == "max_iterations"
    run = await drive(list(calls) + [fake.text("fin")],
                      config=LoopConfig(model="m", max_iterations=None))
    assert run.outcome.stop_reason == "stop" and len(run.provider.requests) == 6


# 8 ------------------------------------------------------------------------------------------
async def test_tool_choice_forwarded_and_reset_after_it_was_honoured() -> None:
    script = [fake.tool_calls(("add", {"a": 1, "b": 1})), fake.text("ok")]
    run = await drive(list(script), config=LoopConfig(model="m", tool_choice="required",
                                                      parallel_tool_calls=False))
    assert [r.tool_choice for r in run.provider.requests] == ["required", "auto"]
    assert all(r.parallel_tool_calls is False for r in run.provider.requests)
    run = await drive(list(script), config=LoopConfig(model="m", tool_choice=ForcedTool("add"),
                                                      reset_tool_choice=False))
    assert [r.tool_choice for r in run.provider.requests] == [ForcedTool("add")] * 2
    run = await drive([fake.text("no pick"), fake.text("x")],
                      config=LoopConfig(model="m", tool_choice=ForcedTool("add")))
    assert run.provider.requests[0].tool_choice == ForcedTool("add")
    assert [t.name for t in run.provider.requests[0].tools] == ["add", "boom", "slow", "maybe"]


# 9 ------------------------------------------------------------------------------------------
async def test_abort_while_streaming_closes_the_stream_and_ends_aborted() -> None:
    run = Run(FakeProvider([fake.hanging("partial ")]))
    run.follow_up.push("never")

    async def abort_soon() -> None:
        while not any(e.type == "message_update" for e in run.events):
            await asyncio.sleep(0.001)
        run.abort.set()

    await asyncio.gather(drive([], run=run), abort_soon())
    assert run.provider.closed == 1
    assert run.outcome.stop_reason == "aborted"
    last_assistant = [m for m in run.outcome.messages if isinstance(m, AssistantMessage)][-1]
    assert last_assistant.stop_reason == "aborted"
    assert last_assistant.content == [TextContent(text="partial ")]
    assert run.types()[-3:] == ["message_end", "turn_end", "agent_end"]
    assert len(run.follow_up) == 1


async def test_abort_while_a_tool_runs_cancels_it_and_returns_taken_messages() -> None:
    cancelled = asyncio.Event()

    from tool_registry import function

    @function(register=False)
    async def wait_forever() -> str:
        """Waits."""
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    from tests.loop.helpers import registry_with

    run = Run(FakeProvider([fake.tool_calls(("wait_forever", {}), ("wait_forever", {}))]))

    async def abort_soon() -> None:
        while not any(e.type == "tool_execution_start" for e in run.events):
            await asyncio.sleep(0.001)
        run.abort.set()

    await asyncio.gather(drive([], run=run, registry=registry_with(wait_forever)), abort_soon())
    assert cancelled.is_set()
    assert run.outcome.stop_reason == "aborted"
    assert [t for t, _ in result_texts(run)] == [
        "Tool execution aborted: the run was cancelled."] * 2
    assert run.types().count("agent_end") == 1


async def test_taken_but_not_injected_message_goes_back_on_abort() -> None:
    run = Run(FakeProvider([fake.tool_calls(("add", {"a": 1, "b": 1}))]))

    class Hook(list):  # type: ignore[type-arg]
        def append(self, event: object) -> None:
            super().append(event)
            if getattr(event, "type", "") == "tool_execution_end":
                run.steering.push("steer me")
            if getattr(event, "type", "") == "turn_end":
                run.abort.set()  # after the steer was taken, before it was injected

    run.events = Hook()
    await drive([], run=run)
    assert run.outcome.stop_reason == "aborted"
    assert len(run.steering) == 1 and run.steering.in_flight == []


# 10 -----------------------------------------------------------------------------------------
async def test_calls_cut_off_by_length_are_not_run() -> None:
    run = await drive([fake.tool_calls(("add", {"a": 1, "b": 2}), stop_reason="length"),
                       fake.text("retrying")])
    assert result_texts(run) == [(CUT_OFF_BY_LENGTH, True)]
    assert run.outcome.stop_reason == "stop"


# 11 -----------------------------------------------------------------------------------------
async def test_history_is_repaired_before_every_call() -> None:
    broken = AssistantMessage(content=[ToolCall(id="x1", name="add", arguments={})],
                              stop_reason="error", error_message="boom")
    dangling = AssistantMessage(content=[ToolCall(id="y1", name="add", arguments={}),
                                         ToolCall(id="y2", name="add", arguments={})],
                                stop_reason="tool_use")
    context = [UserMessage(content="q"), broken,
               ToolResultMessage(tool_call_id="x1", tool_name="add"),
               UserMessage(content="again"), dangling,
               ToolResultMessage(tool_call_id="y1", tool_name="add",
                                 content=[TextContent(text="2")])]
    run = await drive([fake.text("ok")], context=context, prompt="go on")
    sent = run.sent(0)
    assert [m.role for m in sent] == ["user", "user", "assistant", "tool_result", "tool_result",
                                      "user"]
    assert sent[4].tool_call_id == "y2" and sent[4].is_error
    assert sent[4].content[0].text == "No result provided"


# 12 -----------------------------------------------------------------------------------------
async def test_tool_timeout_and_result_cap() -> None:
    run = await drive([fake.tool_calls(("slow", {"seconds": 10})), fake.text("k")])
    assert result_texts(run) == [("Tool slow timed out after 0.05 s", True)]

    from tool_registry import function

    @function(register=False)
    def big() -> str:
        """Lots of output."""
        return "H" * 50_000 + "T" * 50_000

    from tests.loop.helpers import registry_with

    run = await drive([fake.tool_calls(("big", {})), fake.text("k")],
                      registry=registry_with(big),
                      config=LoopConfig(model="m", max_result_chars=1000))
    text = result_texts(run)[0][0]
    assert text.startswith("H" * 500) and text.endswith("T" * 500)
    assert "99000 characters cut" in text


# 13 -----------------------------------------------------------------------------------------
async def test_a_provider_that_raises_still_gets_one_agent_end() -> None:
    class Broken:
        name = "broken"

        async def _gen(self):  # type: ignore[no-untyped-def]
            yield StartEvent()
            yield TextStart(0)
            yield TextDelta(0, "half")
            raise ConnectionError("socket closed")

        def stream(self, request: ModelRequest):  # type: ignore[no-untyped-def]
            return self._gen()

    from app.engine import run_loop
    from tool_registry import build_menu

    events: list = []
    out = await run_loop(provider=Broken(), menu=build_menu(tools=[]),
                         config=LoopConfig(model="m"), context=[], emit=events.append,
                         prompts=[UserMessage(content="x")])
    assert out.stop_reason == "error" and "socket closed" in (out.error or "")
    assert [e.type for e in events].count("agent_end") == 1


async def test_deltas_only_in_message_update() -> None:
    run = await drive([fake.text("abcdef", chunks=3)])
    updates = [e.delta for e in run.events if e.type == "message_update"]
    assert updates == [{"kind": "text_delta", "content_index": 0, "text": t}
                       for t in ("ab", "cd", "ef")]
    start = next(e for e in run.events if e.type == "message_start"
                 and e.message.role == "assistant")
    assert start.message.content == []
