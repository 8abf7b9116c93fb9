"""One run end to end through a real Worker on both backends: events in order with seqs
1..n, status and checkpoint, steering, follow-up, cancel, provider errors."""

from __future__ import annotations

import asyncio

import pytest

from app.engine.queues import QueuedMessage
from app.store import Backend
from providers import fake
from providers.messages import UserMessage
from tests.engine import scripted
from tests.engine.harness import events, new_record, wait_end, wait_ends, wait_event, worker


def qm(mid: str, text: str) -> QueuedMessage:
    return QueuedMessage(id=mid, message=UserMessage(content=text))


async def test_full_run_writes_events_in_order(backend: Backend) -> None:
    resolve = scripted.resolver([fake.tool_calls(("mark", {"n": 1})), fake.text("done")])
    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve):
        end = await wait_end(backend, rec.id)
        async with asyncio.timeout(30):  # its keys get their TTL as its job is acked, after
            # the end's bookkeeping (app.worker.run_end): a moment after the status shows
            while await backend.expires_in(rec.id) is None:  # type: ignore[attr-defined]
                await asyncio.sleep(0.01)
    assert (end.status, end.stop_reason, end.result) == ("completed", "stop", "done")
    assert end.usage["input_tokens"] == 20 and end.ended_at and end.started_at
    log = await events(backend, rec.id)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    types = [e["type"] for e in log if e["type"] != "message_update"]
    assert types == [
        "agent_start", "turn_start", "message_start", "message_end",  # the prompt
        "message_start", "message_end",  # assistant picks mark
        "tool_execution_start", "tool_execution_end", "message_start", "message_end",
        "turn_end", "turn_start", "message_start", "message_end", "turn_end", "agent_end"]
    assert all(e["run_id"] == rec.id and e["ts"].endswith("Z") for e in log)
    ckpt = await backend.load_checkpoint(rec.id)
    assert [m["role"] for m in ckpt] == ["user", "assistant", "tool_result", "assistant"]
    assert await backend.expires_in(rec.id) is not None  # type: ignore[attr-defined]


async def test_steer_during_a_tool_skips_the_remaining_picks(backend: Backend) -> None:
    resolve = scripted.resolver([
        fake.tool_calls(("nap", {"seconds": 0.3}), ("mark", {"n": 2})), fake.text("ok")])
    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve):
        await wait_event(backend, rec.id, "tool_execution_start")
        await backend.enqueue(rec.id, "steer", qm("s1", "change of plan"))
        end = await wait_end(backend, rec.id)
    assert end.status == "completed"
    log = await events(backend, rec.id)
    ends = [e for e in log if e["type"] == "tool_execution_end"]
    assert [e["is_error"] for e in ends] == [False, True]
    users = [e["message"]["content"] for e in log
             if e["type"] == "message_end" and e["message"]["role"] == "user"]
    assert users == ["hi", "change of plan"]
    assert await backend.list_queue(rec.id) == []


async def test_follow_up_after_text(backend: Backend) -> None:
    resolve = scripted.resolver([fake.text("first", chunks=5, delay=0.05), fake.text("second")])
    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve):
        await wait_event(backend, rec.id, "message_update")
        await backend.enqueue(rec.id, "follow_up", qm("f1", "and then?"))
        end = await wait_end(backend, rec.id)
    assert (end.status, end.result) == ("completed", "second")
    ckpt = await backend.load_checkpoint(rec.id)
    assert [m["role"] for m in ckpt] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize("where", ["tool", "model"])
async def test_cancel(backend: Backend, where: str) -> None:
    first = fake.tool_calls(("nap", {"seconds": 30})) if where == "tool" else fake.hanging("x")
    resolve = scripted.resolver([first, fake.text("never")])
    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve):
        marker = "tool_execution_start" if where == "tool" else "message_update"
        await wait_event(backend, rec.id, marker)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await backend.request_cancel(rec.id)
        end = await wait_end(backend, rec.id)
        assert loop.time() - t0 < 1.0
    assert (end.status, end.stop_reason) == ("cancelled", "aborted")
    log = await events(backend, rec.id)
    assert log[-1]["type"] == "agent_end" and log[-1]["stop_reason"] == "aborted"
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))


async def test_provider_error_fails_the_run(backend: Backend) -> None:
    resolve = scripted.resolver([fake.error("boom")])
    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve):
        end = await wait_end(backend, rec.id)
    assert (end.status, end.stop_reason) == ("failed", "error")
    assert end.error and "boom" in end.error


async def test_bad_model_fails_visibly(backend: Backend) -> None:
    def resolve(model: str):  # type: ignore[no-untyped-def]
        raise ValueError(f"unknown model {model}")

    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve):
        end = await wait_end(backend, rec.id)
    assert end.status == "failed" and "unknown model" in (end.error or "")
    assert [e["type"] for e in await events(backend, rec.id)] == ["agent_end"]


@pytest.mark.timeout(240)
async def test_many_concurrent_runs_complete(backend: Backend) -> None:
    resolve = scripted.resolver(lambda: fake.FakeProvider(
        script=[fake.tool_calls(("mark", {"n": 1})), fake.text("done", chunks=4)]))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ids = [(await backend.create_run(new_record()))[0].id for _ in range(200)]
    async with worker(backend, resolve, concurrency=100):
        ends = await wait_ends(backend, ids, timeout=150)
    elapsed = loop.time() - t0
    assert all(e.status == "completed" for e in ends)
    total = sum(e.last_seq for e in ends)
    print(f"200 runs on {backend.name}: {elapsed:.2f}s, {total} events, "
          f"{total / elapsed:.0f} events/s")


@pytest.mark.timeout(240)
async def test_a_long_stream_is_written_whole(backend: Backend) -> None:
    """Every one of 20,000 deltas is written. The rate is printed, not asserted: speed is
    measured in bench/ (a unit test on a loaded machine cannot tell slow code from a busy CPU)."""
    n = 20_000
    resolve = scripted.resolver([fake.text("x" * n, chunks=n)])
    rec, _ = await backend.create_run(new_record())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    async with worker(backend, resolve):
        end = await wait_end(backend, rec.id, timeout=200)
    rate = end.last_seq / (loop.time() - t0)
    print(f"one streaming run on {backend.name}: {rate:.0f} events/s written")
    assert end.last_seq == n + 8
