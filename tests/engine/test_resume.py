"""A run handed from one worker to another looks, to its clients and to the model, like a run
that never moved (issue 9, items 5, 6, 7, 9): both backends, real workers in-process, the hand-
back made at a chosen point (a tool holding, a reply streaming, the wait for follow-ups)."""

from __future__ import annotations

import asyncio
from typing import Any

from app import runtime
from app.engine.queues import QueuedMessage
from app.store import Backend
from providers import fake
from providers.fake import FakeProvider
from providers.messages import UserMessage
from tests.engine import resumable
from tests.engine.harness import events, new_record, wait_end, wait_event, worker
from tests.engine.resumable import assert_clean_log, by_round, one_result_per_call, shared
from tool_registry import function


async def hand_back_at(backend: Backend, resolve: Any, reached: asyncio.Event, rec_id: str,
                       front: Backend | None = None, **options: Any) -> None:
    """Worker A drives the run until ``reached``, then stops (handing the run back)."""
    async with worker(front or backend, resolve, registry=resumable.registry(), **options):
        async with asyncio.timeout(30):
            await reached.wait()
    mid = await backend.get_run(rec_id)
    assert mid is not None and mid.status == "running"


async def resume(backend: Backend, resolve: Any, rec_id: str, **options: Any) -> Any:
    resumable.HOLD.opened.set()
    async with worker(backend, resolve, registry=resumable.registry(), **options):
        await wait_event(backend, rec_id, "run_resumed", timeout=30)
        return await wait_end(backend, rec_id, timeout=30)


async def test_max_iterations_counts_the_rounds_of_every_attempt(backend: Backend) -> None:
    """Capped at 3 with a hand-back in round 2: exactly 3 model calls (main made 5)."""
    resumable.reset()
    provider, resolve = shared(by_round(fake.tool_calls(("mark", {"n": 1})),
                                        fake.tool_calls(("hold", {})),
                                        fake.tool_calls(("mark", {"n": 3}))))
    rec, _ = await backend.create_run(new_record(tools=["mark", "hold"], max_iterations=3))
    await hand_back_at(backend, resolve, resumable.HOLD.reached, rec.id)
    end = await resume(backend, resolve, rec.id)
    assert (end.status, end.stop_reason) == ("completed", "max_iterations")
    assert len(provider.requests) == 3
    log = await events(backend, rec.id)
    assert_clean_log(log)
    assert [e["turn"] for e in log if e["type"] == "turn_start"] == [1, 2, 3]


async def test_a_run_handed_back_after_its_final_answer_ends_without_the_model(
        backend: Backend) -> None:
    resumable.reset()
    provider, resolve = shared(fake.text("the answer", chunks=2))
    rec, _ = await backend.create_run(new_record(tools=[]))
    stuck = resumable.StuckAt(backend, "close_queues")
    await hand_back_at(backend, resolve, stuck.reached, rec.id, front=stuck)
    end = await resume(backend, resolve, rec.id)
    assert (end.status, end.stop_reason, end.result) == ("completed", "stop", "the answer")
    assert len(provider.requests) == 1
    assert_clean_log(await events(backend, rec.id))


async def test_a_follow_up_queued_during_the_hand_back_is_taken_as_the_loop_would(
        backend: Backend) -> None:
    resumable.reset()
    provider, resolve = shared(by_round(fake.text("first"), fake.text("second")))
    rec, _ = await backend.create_run(new_record(tools=[]))
    stuck = resumable.StuckAt(backend, "close_queues")
    await hand_back_at(backend, resolve, stuck.reached, rec.id, front=stuck)
    await backend.enqueue(rec.id, "follow_up",
                          QueuedMessage(id="f1", message=UserMessage(content="and then?")))
    end = await resume(backend, resolve, rec.id)
    assert (end.status, end.result) == ("completed", "second")
    assert len(provider.requests) == 2
    last = provider.requests[1].messages
    assert [m.role for m in last] == ["user", "assistant", "user"]
    assert_clean_log(await events(backend, rec.id))


async def test_an_interrupted_tool_call_is_ended_as_lost_then_run_again(backend: Backend) -> None:
    resumable.reset()
    _, resolve = shared(by_round(fake.tool_calls(("hold", {}, "call_h")),
                                        fake.text("done")))
    rec, _ = await backend.create_run(new_record(tools=["hold"]))
    await hand_back_at(backend, resolve, resumable.HOLD.reached, rec.id)
    end = await resume(backend, resolve, rec.id)
    assert (end.status, end.result) == ("completed", "done")
    log = await events(backend, rec.id)
    assert_clean_log(log)
    hold_events = [(e["type"], e.get("is_error")) for e in log
                   if e.get("tool_call_id") == "call_h" and e["type"].startswith("tool_exec")]
    assert hold_events == [("tool_execution_start", None), ("tool_execution_end", True),
                           ("tool_execution_start", None), ("tool_execution_end", False)]
    lost = next(e for e in log if e["type"] == "tool_execution_end")
    assert "worker" in lost["result"]["content"][0]["text"]
    assert log.index(lost) < next(i for i, e in enumerate(log) if e["type"] == "run_resumed")
    assert [e["type"] for e in log].count("turn_start") == 2
    history = await backend.load_checkpoint(rec.id)
    assert one_result_per_call(history)


async def test_a_reply_cut_off_mid_stream_is_ended_as_lost_and_asked_again_in_its_turn(
        backend: Backend) -> None:
    resumable.reset()
    first = True

    def step(request: Any) -> fake.Step:
        nonlocal first
        if first:
            first = False
            return fake.hanging("half a rep")
        return fake.text("whole reply")

    provider, resolve = shared(step)
    rec, _ = await backend.create_run(new_record(tools=[]))
    streaming = asyncio.Event()

    async def watch() -> None:
        await wait_event(backend, rec.id, "message_update", timeout=30)
        streaming.set()

    watcher = asyncio.create_task(watch())
    await hand_back_at(backend, resolve, streaming, rec.id)
    await watcher
    end = await resume(backend, resolve, rec.id)
    assert (end.status, end.result) == ("completed", "whole reply")
    assert len(provider.requests) == 2  # the cut call is made again, in the same turn
    log = await events(backend, rec.id)
    assert_clean_log(log)
    types = [e["type"] for e in log]
    assert types.count("turn_start") == 1 == types.count("turn_end")
    lost = [e["message"] for e in log if e["type"] == "message_end"
            and e["message"]["role"] == "assistant" and e["message"]["stop_reason"] == "error"]
    assert len(lost) == 1 and "worker" in lost[0]["error_message"]
    history = await backend.load_checkpoint(rec.id)
    assert [m["role"] for m in history] == ["user", "assistant"]  # the cut reply is not in it


async def test_a_nested_loop_cut_by_the_hand_back_is_ended_at_every_depth(
        backend: Backend) -> None:
    resumable.reset()
    inner_calls = 0

    @function(register=False)
    async def delegate() -> str:
        """Runs a nested loop."""
        nonlocal inner_calls
        inner_calls += 1
        step = fake.hanging("thinking") if inner_calls == 1 else fake.text("inner done")
        out = await runtime.exec("go", provider=FakeProvider([step]), toolset="none")
        return f"inner: {out.text}"

    _, resolve = shared(by_round(fake.tool_calls(("delegate", {}, "call_d")),
                                        fake.text("outer done")))
    rec, _ = await backend.create_run(new_record(tools=["delegate"]))
    nested = asyncio.Event()

    async def watch() -> None:
        after = 0
        async with asyncio.timeout(30):
            while not nested.is_set():
                for e in await backend.wait_events(rec.id, after, timeout=1):
                    after = e.seq
                    if e.type == "message_update":
                        nested.set()

    watcher = asyncio.create_task(watch())
    async with worker(backend, resolve, registry=resumable.registry(delegate)):
        async with asyncio.timeout(30):
            await nested.wait()
    await watcher
    async with worker(backend, resolve, registry=resumable.registry(delegate)):
        end = await wait_end(backend, rec.id, timeout=30)
    assert (end.status, end.result) == ("completed", "outer done")
    log = await events(backend, rec.id)
    assert_clean_log(log)
    nested_ends = [e for e in log if e["type"] == "agent_end" and e["depth"] == 1]
    assert [e["stop_reason"] for e in nested_ends] == ["error", "stop"]
    delegated = [e for e in log if e["type"] == "tool_execution_end"
                 and e["tool_name"] == "delegate" and e["depth"] == 0]
    assert delegated and delegated[-1]["is_error"] is False
    assert "inner: inner done" in str(delegated[-1]["result"]), delegated[-1]


async def test_tools_loaded_by_tool_search_stay_on_the_menu_after_a_resume(
        backend: Backend) -> None:
    from tool_registry.builtin.tool_search import tool_search

    @function(register=False, defer=True)
    def weather(city: str) -> str:
        """Current weather for a city."""
        return f"sunny in {city}"

    resumable.reset()
    provider, resolve = shared(by_round(fake.tool_calls(("tool_search", {"query": "weather"})),
                                        fake.tool_calls(("hold", {})),
                                        fake.tool_calls(("weather", {"city": "Oslo"})),
                                        fake.text("done")))
    reg = resumable.registry(weather, tool_search)
    rec, _ = await backend.create_run(new_record(tools=["hold", "weather", "tool_search"]))
    async with worker(backend, resolve, registry=reg):
        async with asyncio.timeout(30):
            await resumable.HOLD.reached.wait()
    resumable.HOLD.opened.set()
    async with worker(backend, resolve, registry=reg):
        end = await wait_end(backend, rec.id, timeout=30)
    assert (end.status, end.result) == ("completed", "done")
    menus = [sorted(t.name for t in r.tools) for r in provider.requests]
    assert menus[0] == ["hold", "tool_search"]
    assert all("weather" in m for m in menus[1:])  # before and after the hand-back
    log = await events(backend, rec.id)
    result = next(e for e in log if e["type"] == "tool_execution_end"
                  and e["tool_name"] == "weather")
    assert result["is_error"] is False and "sunny" in str(result["result"])
