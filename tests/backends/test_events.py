"""The event log: backend-allocated seqs, atomic batches with checkpoint/acks/fields,
idempotent retries, fencing, service events beside worker writes, waiting tails."""

from __future__ import annotations

import asyncio
import gc

import orjson
import pytest

from app.engine.events import MessageQueued
from app.store import Backend, EventBatch, FencedOut
from app.store.memory.backend import MemoryBackend
from app.store.records import StoredEvent
from tests.backends.conftest import LEASE
from tests.backends.helpers import batch, created_and_claimed


async def test_seqs_are_allocated_in_order_without_gaps(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    assert await backend.append_events(claim.run_id, 1, batch("a", "b")) == 2
    assert await backend.append_service_event(
        claim.run_id, MessageQueued(message_id="m1", kind="steer")) == 3
    assert await backend.append_events(claim.run_id, 1, batch("c")) == 4
    events = await backend.read_events(claim.run_id, 0)
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert [e.type for e in events] == ["x", "x", "message_queued", "x"]
    first = orjson.loads(events[0].data)
    assert first == {"seq": 1, "run_id": "r", "ts": "t", "type": "x", "text": "a"}
    assert next(iter(first)) == "seq"
    queued = orjson.loads(events[2].data)
    assert queued["seq"] == 3 and queued["run_id"] == claim.run_id and queued["kind"] == "steer"
    assert [e.seq for e in await backend.read_events(claim.run_id, 2, limit=1)] == [3]
    rec = await backend.get_run(claim.run_id)
    assert rec is not None and rec.last_seq == 4


async def test_concurrent_appenders_never_share_a_seq(backend: Backend) -> None:
    claim = await created_and_claimed(backend)

    async def worker() -> None:
        for i in range(20):
            await backend.append_events(claim.run_id, 1, batch(f"w{i}"))

    async def api() -> None:
        for i in range(20):
            await backend.append_service_event(
                claim.run_id, MessageQueued(message_id=f"m{i}", kind="follow_up"))

    await asyncio.gather(worker(), api())
    seqs = [e.seq for e in await backend.read_events(claim.run_id, 0)]
    assert seqs == list(range(1, 41))


async def test_batch_carries_checkpoint_fields_and_is_idempotent(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    b = batch("a", checkpoint=[b'{"role":"user","content":"hi"}'], fields={"status": "running"},
              token="1:1")
    assert await backend.append_events(claim.run_id, 1, b) == 1
    assert await backend.append_events(claim.run_id, 1, b) == 1  # a retried write
    assert await backend.load_checkpoint(claim.run_id) == [{"role": "user", "content": "hi"}]
    rec = await backend.get_run(claim.run_id)
    assert rec is not None and rec.status == "running" and rec.last_seq == 1


async def test_stale_attempt_is_fenced_out(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    await backend.release_run(claim.run_id, claim.attempt)
    again = await backend.claim("w2", timeout=2)
    assert again is not None and again.attempt == 2 and again.resumed
    with pytest.raises(FencedOut):
        await backend.append_events(claim.run_id, 1, batch("stale", checkpoint=[b"{}"]))
    assert await backend.read_events(claim.run_id, 0) == []
    assert await backend.load_checkpoint(claim.run_id) == []
    assert await backend.append_events(claim.run_id, 2, EventBatch()) == 0


async def test_wait_events_wakes_on_append_and_times_out(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    assert await backend.wait_events(claim.run_id, 0, timeout=0.05) == []
    waiters = [asyncio.create_task(backend.wait_events(claim.run_id, 0, timeout=5))
               for _ in range(3)]
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await backend.append_events(claim.run_id, 1, batch("a"))
    results = await asyncio.gather(*waiters)
    assert loop.time() - t0 < 0.5
    assert all([e.seq for e in r] == [1] for r in results)
    assert [e.seq for e in await backend.wait_events(claim.run_id, 0, timeout=1)] == [1]


async def test_each_append_wakes_the_readers_waiting_then(backend: Backend) -> None:
    """A reader woken by one append and waiting again is woken by the next (the memory
    backend makes the event a wait sleeps on only when someone waits)."""
    claim = await created_and_claimed(backend)
    await backend.append_events(claim.run_id, 1, batch("a"))  # nobody waiting
    for seq in (2, 3):
        waiter = asyncio.create_task(backend.wait_events(claim.run_id, seq - 1, timeout=5))
        await asyncio.sleep(0.02)
        assert not waiter.done()
        await backend.append_events(claim.run_id, 1, batch("b"))
        assert [e.seq for e in await asyncio.wait_for(waiter, 5)] == [seq]


async def test_the_first_event_is_written_with_the_run(backend: Backend) -> None:
    from app.engine.events import RunCreated
    from tests.backends.helpers import record

    rec, created = await backend.create_run(record(), first_event=RunCreated(model="fake:m"))
    events = await backend.read_events(rec.id, 0)
    assert created and [(e.seq, e.type) for e in events] == [(1, "run_created")]
    data = orjson.loads(events[0].data)
    assert data["seq"] == 1 and data["status"] == "queued" and data["run_id"] == rec.id
    fresh = getattr(backend, "fresh_runs", None)  # a store across the network remembers it
    if fresh is not None:
        made = fresh.get(rec.id)
        assert made is not None and made.tenant == rec.tenant and made.first == events[0]
        repeat = record(id=f"{rec.id}x")
        await backend.create_run(repeat, idempotency_key="k", request_hash="h")
        assert fresh.get(repeat.id) is None  # no first event written: nothing to remember
    claim = await backend.claim("w1", timeout=2)
    assert claim is not None and claim.run_id == rec.id
    assert await backend.append_events(rec.id, claim.attempt, batch("a")) == 2


async def test_the_memory_log_is_invisible_to_the_collector() -> None:
    """The in-process backend keeps a run's log as plain ``(seq, type, data)`` tuples: after one
    collection the collector stops tracking them, so thousands of stored events are not walked
    again by every later collection (StoredEvent objects were 40 % of the young generation with
    300 live streams, and the pauses set the lag p99). Reads still answer StoredEvents."""
    backend = MemoryBackend(lease=LEASE, run_ttl=3600)
    await backend.start()
    try:
        claim = await created_and_claimed(backend)
        await backend.append_events(claim.run_id, claim.attempt, batch("a", "b"))
        gc.collect()
        log = backend._state[claim.run_id].events
        assert len(log) == 2 and not any(gc.is_tracked(e) for e in log)
        events = await backend.read_events(claim.run_id, 0)
        assert [(e.seq, e.type) for e in events] == [(1, "x"), (2, "x")]
        assert all(isinstance(e, StoredEvent) for e in events)
    finally:
        await backend.close()


async def test_an_append_to_a_run_that_is_not_there_is_refused(backend: Backend) -> None:
    """Nothing is written for an unknown run, with or without a token or a fence."""
    from app.store import RunNotFound

    for attempt, token in ((1, "1:1"), (None, "")):
        with pytest.raises(RunNotFound):
            await backend.append_events("run_missing", attempt,
                                        batch("a", fields={"status": "running"}, token=token))
    assert await backend.read_events("run_missing", 0) == []
    assert await backend.get_run("run_missing") is None


async def test_a_retried_batch_answers_the_seq_of_its_first_write(backend: Backend) -> None:
    """A batch sent again with its token (its reply was lost) writes nothing more and answers
    the run's last seq; an empty batch with fields only answers it too."""
    claim = await created_and_claimed(backend)
    first = batch("a", "b", fields={"status": "running"}, token="1:1")
    assert await backend.append_events(claim.run_id, 1, first) == 2
    assert await backend.append_events(claim.run_id, 1, first) == 2
    assert await backend.append_events(claim.run_id, 1,
                                       EventBatch(fields={"usage": {"n": 1}})) == 2
    assert await backend.append_events(claim.run_id, 1, batch("c", token="1:2")) == 3
    assert [e.seq for e in await backend.read_events(claim.run_id, 0)] == [1, 2, 3]
    rec = await backend.get_run(claim.run_id)
    assert rec is not None and rec.last_seq == 3 and rec.status == "running"
