"""``AGENTLOOP_EVENT_FLUSH_MS`` (``EventSink.flush_interval``): while a run streams fast, the
writer's store writes are spaced at least that far apart and gather the events emitted
meanwhile; the first event after a quiet spell and the run's close are written at once.

The backend here records when each batch arrived (a store whose writes wait, as Redis does).
Spacing is a lower bound, so these checks hold however slow the machine is."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from app.engine.events import AgentEnd, TurnStart
from app.store.records import EventBatch
from app.worker.sink import EventSink
from providers.messages import Usage


class RecordingStore:
    def __init__(self) -> None:
        self.batches: list[tuple[float, int]] = []
        self.seq = 0

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        await asyncio.sleep(0)
        self.batches.append((asyncio.get_running_loop().time(), len(batch.events)))
        self.seq += len(batch.events)
        return self.seq


def _end() -> Any:
    return AgentEnd(stop_reason="stop", error=None, usage=Usage(), messages=[])


async def test_fast_events_are_gathered_into_spaced_writes() -> None:
    store = RecordingStore()
    sink = EventSink(store, "r", 1, flush_interval=0.05)  # type: ignore[arg-type]
    for _ in range(40):  # 40 events over at least 0.2 s
        sink.emit(_delta())
        await asyncio.sleep(0.005)
    sink.emit(_end())
    await sink.close()
    times = [t for t, _ in store.batches]
    assert sum(n for _, n in store.batches) == 41
    assert len(store.batches) < 41 // 2  # gathered
    gaps = [b - a for a, b in itertools.pairwise(times[:-1])]
    assert all(gap >= 0.05 * 0.9 for gap in gaps), gaps  # the close is not held back


async def test_the_first_event_after_a_quiet_spell_is_written_at_once() -> None:
    store = RecordingStore()
    sink = EventSink(store, "r", 1, flush_interval=10.0)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    sink.emit(_delta())
    start = loop.time()
    while not store.batches:
        await asyncio.sleep(0.001)
    assert store.batches[0][0] - start < 5.0  # not held for the 10 s interval
    sink.emit(_delta())  # within the interval: waits for it ...
    sink.emit(_end())
    await asyncio.wait_for(sink.close(), 5.0)  # ... unless the run closes
    assert sum(n for _, n in store.batches) == 3


def _delta() -> Any:
    return TurnStart(turn=1)
