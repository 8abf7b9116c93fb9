"""``EventSink.stop`` (a runner crashed): nothing of the sink lands after it returns, even a
write its writer had out when it was cancelled. A store pipeline (Redis Cluster's per-master
script pipelines) sends a batch from a task of its own, so cancelling the writer that awaits
it does not take the batch back; the crash handler then read the log without it and closed
the spans it found, and the batch landed after: a tool start with no end. The store here
applies each batch the test releases, whatever became of its caller."""

from __future__ import annotations

import asyncio
import gc

import pytest

from app.engine.events import TurnStart
from app.store.records import EventBatch
from app.worker.sink import EventSink


class PipelinedStore:
    """Writes applied by a task of their own once ``release`` is set (no in-place path)."""

    append_now = None
    append_soon = None

    def __init__(self) -> None:
        self.log: list[str] = []
        self.release = asyncio.Event()
        self.sent = asyncio.Event()
        self._tasks: set[asyncio.Task[int]] = set()

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        async def apply() -> int:
            await self.release.wait()
            self.log += [t for t, _ in batch.events]
            return len(self.log)

        task = asyncio.create_task(apply())
        self._tasks.add(task)
        self.sent.set()
        return await task  # cancelling this caller leaves the task: the write goes on


async def test_stop_returns_only_once_the_write_out_has_landed() -> None:
    store = PipelinedStore()
    sink = EventSink(store, "run_1", 1, flush_interval=0.0)  # type: ignore[arg-type]
    sink.emit(TurnStart(turn=1))
    await asyncio.wait_for(store.sent.wait(), 5)
    assert store.log == []  # the batch is out, not applied
    stopping = asyncio.create_task(sink.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()  # waits for the write it cannot take back
    store.release.set()
    await asyncio.wait_for(stopping, 5)
    landed = list(store.log)
    assert landed == ["turn_start"]  # what the crash handler reads next is all there is
    sink.emit(TurnStart(turn=2))  # dropped: the sink is stopped
    await asyncio.sleep(0.05)
    assert store.log == landed


async def test_a_failed_write_out_at_stop_is_not_left_unretrieved(
        caplog: pytest.LogCaptureFixture) -> None:
    """Its error goes nowhere (the writer is gone) and is not logged as never retrieved."""
    store = PipelinedStore()

    async def failing(run_id: str, attempt: int | None, batch: EventBatch) -> int:
        store.sent.set()
        await store.release.wait()
        raise RuntimeError("lost")

    store.append_events = failing  # type: ignore[method-assign]
    sink = EventSink(store, "run_2", 1, flush_interval=0.0)  # type: ignore[arg-type]
    sink.emit(TurnStart(turn=1))
    await asyncio.wait_for(store.sent.wait(), 5)
    stopping = asyncio.create_task(sink.stop())
    await asyncio.sleep(0)
    store.release.set()
    await asyncio.wait_for(stopping, 5)
    del sink
    gc.collect()
    assert "never retrieved" not in caplog.text
