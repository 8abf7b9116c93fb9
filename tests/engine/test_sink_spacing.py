"""``AGENTLOOP_EVENT_FLUSH_MS`` (``EventSink.flush_interval``): while a run streams fast, the
writer's store writes are spaced at least that far apart and gather the events emitted
meanwhile; the first event after a quiet spell and the run's close are written at once.

The backend here records when each batch arrived (a store whose writes wait, as Redis does).
Spacing is a lower bound, so these checks hold however slow the machine is."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

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


def _written() -> float:
    from app.telemetry import metrics

    return float(metrics.EVENTS_WRITTEN._value.get())


async def test_the_events_written_counter_is_kept_per_second_not_per_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``agentloop_events_written_total`` is updated once per ``REPORT_EVERY`` while a run
    streams (one counter update per frame was ~2 % of a run's instructions), and with
    everything at the run's end: no event is missing from it once the sink is closed."""
    import app.worker.sink as sink_module

    monkeypatch.setattr(sink_module, "REPORT_EVERY", 3600.0)
    store = RecordingStore()
    sink = EventSink(store, "r", 1)  # type: ignore[arg-type]
    before = _written()
    for emitted in range(1, 6):
        sink.emit(_delta())
        while sink.written < emitted:
            await asyncio.sleep(0.001)
    assert len(store.batches) >= 2  # written as several batches …
    assert _written() - before == store.batches[0][1]  # … counted at the first one only
    sink.emit(_end())
    await sink.close()
    assert _written() - before == 6


async def test_a_stopped_sink_counts_what_it_wrote() -> None:
    store = RecordingStore()
    sink = EventSink(store, "r", 1)  # type: ignore[arg-type]
    before = _written()
    sink.emit(_delta())
    while not store.batches:
        await asyncio.sleep(0.001)
    sink.emit(_delta())
    while sink.written < 2:
        await asyncio.sleep(0.001)
    await sink.stop()
    assert _written() - before == 2
