"""runtime.exec/stream: tools on by default, opt-outs, nested exec, resume, progress, deferral."""

from __future__ import annotations

from app import runtime
from app.engine import LoopConfig, Resume, run_loop
from app.engine.events import Event, TurnEnd
from providers import fake
from providers.fake import FakeProvider
from providers.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from tests.loop.helpers import registry_with
from tool_registry import Progress, ToolContext, build_menu, default_registry, function


@function(toolsets=["testing"])
def rt_echo(text: str) -> str:
    """Echo text back (test tool in the default registry)."""
    return text


async def test_tools_are_on_by_default_and_opt_outs_give_pure_text_calls() -> None:
    p = FakeProvider([fake.text("a")], repeat=True)
    await runtime.exec("hi", provider=p)
    offered = {t.name for t in p.requests[0].tools}
    full = {n for n, t in default_registry.tools.items() if t.options.expose}
    assert "rt_echo" in offered
    assert offered == {n for n in full if not default_registry.tools[n].options.defer
                       and build_menu().lookup(n) is not None}
    await runtime.exec("hi", provider=p, toolset="none")
    await runtime.exec("hi", provider=p, tools=[])
    assert p.requests[1].tools == [] and p.requests[2].tools == []


async def test_exec_returns_text_messages_stop_reason_and_usage() -> None:
    p = FakeProvider([fake.tool_calls(("rt_echo", {"text": "yo"})), fake.text("said yo")])
    out = await runtime.exec("say yo", provider=p, tools=["rt_echo"])
    assert out.text == "said yo" and out.stop_reason == "stop" and out.error is None
    assert [m.role for m in out.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert out.usage.input_tokens == 20
    p2 = FakeProvider([fake.tool_calls(("rt_echo", {"text": "x"}))], repeat=True)
    capped = await runtime.exec("loop", provider=p2, tools=["rt_echo"])
    assert capped.stop_reason == "max_iterations" and len(p2.requests) == 20


async def test_stream_yields_events_through_agent_end() -> None:
    p = FakeProvider([fake.text("streamed", chunks=2)])
    types = [e.type async for e in runtime.stream("hi", provider=p, toolset="none")]
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert types.count("message_update") == 2


async def test_nested_exec_inherits_tools_and_reports_depth_and_parent() -> None:
    inner = FakeProvider([fake.tool_calls(("rt_echo", {"text": "deep"})), fake.text("inner done")])

    @function(register=False)
    async def delegate(task: str) -> str:
        """Runs a nested loop."""
        out = await runtime.exec(task, provider=inner)
        return f"inner said: {out.text}"

    outer = FakeProvider([fake.tool_calls(("delegate", {"task": "go deep"}), ("x", {}, "c9")),
                          fake.text("outer done")])
    seen: list[Event] = []
    reg = registry_with(delegate, rt_echo)
    out = await runtime.exec("start", provider=outer, tools=[reg.tools["delegate"],
                                                            reg.tools["rt_echo"]],
                             on_event=seen.append)
    assert out.text == "outer done"
    assert {t.name for t in inner.requests[0].tools} == {"delegate", "rt_echo"}
    nested = [e for e in seen if e.depth == 1]
    assert nested[0].type == "agent_start" and nested[-1].type == "agent_end"
    assert {e.parent_tool_call_id for e in nested} == {"call_1"}
    assert [e.type for e in seen if e.depth == 0].count("agent_end") == 1
    results = [m for m in out.messages if isinstance(m, ToolResultMessage)]
    assert results[0].content[0].text == "inner said: inner done"


async def test_progress_becomes_tool_execution_update() -> None:
    @function(register=False)
    async def work(steps: int, progress: Progress, ctx: ToolContext) -> str:
        """Reports progress."""
        for i in range(steps):
            progress({"step": i + 1, "run": ctx.run_id})
        return "done"

    assert "progress" not in work.spec.parameters["properties"]
    assert "ctx" not in work.spec.parameters["properties"]
    p = FakeProvider([fake.tool_calls(("work", {"steps": 2})), fake.text("ok")])
    events: list[Event] = []
    await run_loop(provider=p, menu=build_menu(registry=registry_with(work)),
                   config=LoopConfig(model="m", run_id="r1"), context=[], emit=events.append,
                   prompts=[UserMessage(content="go")])
    updates = [e.partial_result for e in events if e.type == "tool_execution_update"]
    assert updates == [{"step": 1, "run": "r1"}, {"step": 2, "run": "r1"}]


async def test_resume_runs_only_the_unanswered_calls_and_sends_no_agent_start() -> None:
    ran: list[int] = []

    @function(register=False)
    def count(n: int) -> int:
        """Counts."""
        ran.append(n)
        return n

    done = [UserMessage(content="go"),
            AssistantMessage(content=[ToolCall(id="a", name="count", arguments={"n": 1}),
                                      ToolCall(id="b", name="count", arguments={"n": 2})],
                             stop_reason="tool_use"),
            ToolResultMessage(tool_call_id="a", tool_name="count")]
    p = FakeProvider([fake.text("resumed")])
    events: list[Event] = []
    out = await run_loop(provider=p, menu=build_menu(registry=registry_with(count)),
                         config=LoopConfig(model="m"), context=list(done), emit=events.append,
                         resume=Resume(messages=done, rounds=1, turn_open=True))
    assert ran == [2]
    types = [e.type for e in events]
    assert types[0] == "tool_execution_start" and "agent_start" not in types
    assert types.count("turn_start") == 1 and types.count("turn_end") == 2  # its own turn ends
    turn_end = next(e for e in events if isinstance(e, TurnEnd))
    assert [r.tool_call_id for r in turn_end.tool_results] == ["a", "b"]
    assert out.result == "resumed" and len(out.messages) == 5


async def test_deferred_tools_are_loaded_by_tool_search_for_the_next_round() -> None:
    from tool_registry.builtin.tool_search import tool_search

    @function(register=False, defer=True)
    def weather(city: str) -> str:
        """Current weather for a city."""
        return f"sunny in {city}"

    reg = registry_with(weather, tool_search, rt_echo)
    p = FakeProvider([fake.tool_calls(("weather", {"city": "Oslo"})),
                      fake.tool_calls(("tool_search", {"query": "weather city"})),
                      fake.tool_calls(("weather", {"city": "Oslo"})), fake.text("sunny")])
    events: list[Event] = []
    await run_loop(provider=p, menu=build_menu(registry=reg), config=LoopConfig(model="m"),
                   context=[], emit=events.append, prompts=[UserMessage(content="weather?")])
    assert [t.name for t in p.requests[0].tools] == ["tool_search", "rt_echo"]
    assert [t.name for t in p.requests[2].tools] == ["weather", "tool_search", "rt_echo"]
    results = [e for e in events if e.type == "tool_execution_end"]
    assert results[0].is_error and "not found" in results[0].result["content"][0].text
    assert results[2].result["content"][0].text == "sunny in Oslo"
    plain = build_menu(registry=registry_with(tool_search, rt_echo))
    assert plain.names() == ["rt_echo"]  # nothing deferred: no search tool on the menu


async def test_arguments_that_are_not_json_become_an_error_result() -> None:
    from providers.events import DoneEvent, StartEvent, ToolCallDelta, ToolCallEnd, ToolCallStart
    from providers.fake import Step

    bad = Step([StartEvent(), ToolCallStart(0, "c1", "rt_echo"), ToolCallDelta(0, '{"text": '),
                ToolCallEnd(0), DoneEvent("tool_use")])
    p = FakeProvider([bad, fake.text("sorry")])
    out = await runtime.exec("x", provider=p, tools=["rt_echo"])
    result = next(m for m in out.messages if isinstance(m, ToolResultMessage))
    assert result.is_error and result.content[0].text.startswith("Invalid arguments: ")


async def test_a_forced_tool_choice_honoured_before_a_resume_is_not_forced_again() -> None:
    @function(register=False)
    def count(n: int) -> int:
        """Counts."""
        return n

    done = [UserMessage(content="go"),
            AssistantMessage(content=[ToolCall(id="a", name="count", arguments={"n": 1})],
                             stop_reason="tool_use"),
            ToolResultMessage(tool_call_id="a", tool_name="count")]
    p = FakeProvider([fake.text("resumed")])
    await run_loop(provider=p, menu=build_menu(registry=registry_with(count)),
                   config=LoopConfig(model="m", tool_choice="required"), context=list(done),
                   emit=lambda e: None, resume=Resume(messages=done, rounds=1))
    assert [r.tool_choice for r in p.requests] == ["auto"]
