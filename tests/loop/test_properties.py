"""Properties over random scripted runs with random steering, follow-up and abort timing."""

from __future__ import annotations

import asyncio
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.loop import LoopConfig, run_loop
from app.queues import ListQueue
from providers import fake
from providers.fake import FakeProvider, Step
from providers.messages import AssistantMessage, ToolResultMessage, UserMessage
from tests.loop.helpers import registry_with
from tool_registry import build_menu, function


@function(register=False)
async def nap(ms: int = 1) -> str:
    """Sleeps a little."""
    await asyncio.sleep(ms / 1000)
    return "rested"


@function(register=False)
def fail() -> str:
    """Fails."""
    raise ValueError("nope")


REGISTRY = registry_with(nap, fail)

calls = st.lists(st.sampled_from([("nap", {"ms": 1}), ("nap", {"ms": "2"}), ("fail", {}),
                                  ("ghost", {}), ("nap", {"ms": "x"})]), min_size=1, max_size=3)
steps = st.one_of(
    st.builds(lambda t: fake.text(t, chunks=2), st.text(max_size=6)),
    st.builds(lambda cs: fake.tool_calls(*cs), calls),
    st.builds(lambda cs: fake.tool_calls(*cs, stop_reason="length"), calls),
    st.just(fake.error("provider failed")),
)
actions = st.lists(st.tuples(st.integers(0, 60), st.sampled_from(["steer", "follow", "abort"])),
                   max_size=4)


def run_random(script: list[Step], plan: list[tuple[int, str]], cap: int | None) -> tuple[
        list, list]:
    async def main() -> tuple[list, list]:
        steering, follow_up, abort = ListQueue(), ListQueue(), asyncio.Event()
        events: list = []
        seqs: list[int] = []

        def emit(event: object) -> None:
            events.append(event)
            seqs.append(len(events))
            for at, what in plan:
                if at == len(events):
                    if what == "steer":
                        steering.push("steer!")
                    elif what == "follow":
                        follow_up.push("more!")
                    else:
                        abort.set()

        provider = FakeProvider(list(script) + [fake.text("end")], repeat=True)
        context: list = []
        await asyncio.wait_for(run_loop(
            provider=provider, menu=build_menu(registry=REGISTRY),
            config=LoopConfig(model="m", max_iterations=cap), context=context, emit=emit,
            prompts=[UserMessage(content="go")], steering=steering, follow_up=follow_up,
            abort=abort), timeout=10)
        assert seqs == sorted(seqs) == list(range(1, len(events) + 1))
        assert steering.in_flight == [] and follow_up.in_flight == []
        return events, context

    return asyncio.run(main())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=1, max_size=5), actions, st.one_of(st.none(), st.integers(0, 6)))
def test_loop_invariants(script: list[Step], plan: list[tuple[int, str]],
                         cap: int | None) -> None:
    events, context = run_random(script, plan, cap)
    types = [e.type for e in events]
    assert types.count("agent_end") == 1 and types[-1] == "agent_end"
    assert types[0] == "agent_start"
    starts = Counter(e.tool_call_id for e in events if e.type == "tool_execution_start")
    ends = Counter(e.tool_call_id for e in events if e.type == "tool_execution_end")
    assert starts == ends
    # every call of a usable assistant message has exactly one result (the fake reuses ids
    # across rounds, so compare multisets)
    results = Counter(m.tool_call_id for m in context if isinstance(m, ToolResultMessage))
    expected = Counter(c.id for m in context if isinstance(m, AssistantMessage)
                       and m.stop_reason not in ("error", "aborted") for c in m.tool_calls())
    assert results == expected
    assert sum(results.values()) == sum(ends.values())
    assert types.count("turn_start") == types.count("turn_end")
