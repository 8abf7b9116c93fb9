"""Properties over random scripted runs with random steering, follow-up and abort timing."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine import LoopConfig, Resume, run_loop
from app.engine.events import Event, RunResumed, encode_event_body
from app.engine.queues import ListQueue
from app.engine.resume import scan
from app.store.records import with_seq
from providers import fake
from providers.fake import FakeProvider, Step
from providers.messages import (
    AssistantMessage,
    ToolResultMessage,
    UserMessage,
    dump_messages,
    load_messages,
)
from tests.engine.resumable import closed_spans, one_result_per_call
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


# -- random crash / hand-back points ------------------------------------------------------
# A worker's event writer runs whenever the loop awaits; a worker that dies has written what
# its writer had taken by then. ``Crashes`` plays that: a writer task persists the emitted
# events each time it runs and, at a chosen tick, the attempt dies (the rest is lost). The next
# attempt resumes as the runner does: closers for the starts left open, the checkpoint (depth-0
# message_ends written) as history, rounds and the open turn from the log.


@function(register=False)
async def step(n: int = 1) -> str:
    """Yields to the event loop ``n`` times."""
    for _ in range(n):
        await asyncio.sleep(0)
    return "stepped"


CRASH_REGISTRY = registry_with(step, fail)
crash_calls = st.lists(st.sampled_from([("step", {"n": 1}), ("step", {"n": 3}), ("fail", {}),
                                        ("ghost", {}), ("step", {"n": "x"})]),
                       min_size=1, max_size=3)
crash_steps = st.one_of(
    st.builds(lambda t: fake.text(t, chunks=3), st.text(max_size=6)),
    st.builds(lambda cs: fake.tool_calls(*cs), crash_calls),
    st.builds(lambda cs: fake.tool_calls(*cs, stop_reason="length"), crash_calls),
    st.just(fake.error("provider failed")),
)


class Yielding:
    """A provider that yields to the event loop before each event (a real stream's pace)."""

    name = "fake"

    def __init__(self, inner: FakeProvider) -> None:
        self.inner = inner

    async def stream(self, request: Any) -> Any:
        async for event in self.inner.stream(request):
            await asyncio.sleep(0)
            yield event


class Crashes:
    """The stored side of one run across attempts: its log and its checkpoint."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.checkpoint: list[dict[str, Any]] = []

    def write(self, events: list[Event], *, checkpoint: bool = True) -> None:
        for event in events:
            body = encode_event_body(event, run_id="r", ts="t")
            self.log.append(orjson.loads(with_seq(len(self.log) + 1, body)))
            if checkpoint and event.type == "message_end" and event.depth == 0:
                self.checkpoint.append(dump_messages([event.message])[0])

    async def attempt(self, provider: Yielding, cap: int | None, crash_at: int | None) -> bool:
        """One attempt; True when it ended (its agent_end written)."""
        state = scan(self.log)
        if state.ended is not None:
            return True
        resume = None
        if state.started:
            self.write(state.closers(), checkpoint=False)
            self.write([RunResumed(worker="w", attempt=2)])
            done = load_messages(self.checkpoint)
            resume = Resume(messages=done, rounds=state.rounds, turn_open=state.turn_open)
        emitted: list[Event] = []
        written = 0
        config = LoopConfig(model="m", max_iterations=cap)
        task = asyncio.ensure_future(run_loop(
            provider=provider, menu=build_menu(registry=CRASH_REGISTRY), config=config,
            context=list(resume.messages) if resume else [], emit=emitted.append,
            prompts=[] if resume and resume.messages else [UserMessage(content="go")],
            resume=resume))
        ticks = 0
        while not task.done():
            await asyncio.sleep(0)
            ticks += 1
            if crash_at is not None and ticks >= crash_at:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                self.write(emitted[:written])  # what the writer had taken: the rest is lost
                return False
            written = len(emitted)
        task.result()
        self.write(emitted)
        return True


def run_with_crashes(script: list[Step], cap: int | None, crashes: list[int]) -> Crashes:
    async def main() -> Crashes:
        run = Crashes()
        provider = Yielding(FakeProvider(list(script) + [fake.text("end")], repeat=True))
        for crash_at in [*crashes, None]:
            if await asyncio.wait_for(run.attempt(provider, cap, crash_at), timeout=10):
                break
        return run

    return asyncio.run(main())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(crash_steps, min_size=1, max_size=5), st.one_of(st.none(), st.integers(0, 5)),
       st.lists(st.integers(1, 40), max_size=3))
def test_invariants_hold_across_random_crash_points(script: list[Step], cap: int | None,
                                                    crashes: list[int]) -> None:
    run = run_with_crashes(script, cap, crashes)
    log = run.log
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))  # seq order = emission order
    top = [e["type"] for e in log if e["depth"] == 0]
    assert top.count("agent_start") == 1 and top.count("agent_end") == 1
    assert log[-1]["type"] == "agent_end" and log[-1]["depth"] == 0
    assert closed_spans(log)  # every start has exactly one end
    assert one_result_per_call(run.checkpoint)  # every call in the history: one result
    assert log[-1]["messages"] == run.checkpoint  # the run's messages are its history
    if cap is not None:
        assert top.count("turn_start") <= max(1, cap)
