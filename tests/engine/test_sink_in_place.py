"""A backend that answers later but sends without a coroutine (``AppendsSoon``: Redis on its
lean connection) is written in place: the batch goes out from the loop step that emitted it,
and its answer sends what was emitted meanwhile; no task wakes per frame. One write is out at
a time, a failed one is retried by the writer (same batch, same token) before anything newer,
a fenced one ends the sink, and a fast stream still gets the flush interval's spacing.

The store here answers each in-place write only when the test says so, so every check is
about order, never about time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from app.engine.events import AgentEnd, TurnStart
from app.store.errors import BackendError, FencedOut
from app.store.records import EventBatch
from app.worker.sink import EventSink
from providers.messages import Usage

Done = Callable[[int, BaseException | None], None]


class AnsweringStore:
    def __init__(self) -> None:
        self.out: list[tuple[EventBatch, Done, asyncio.Future[Any]]] = []
        self.by_writer: list[EventBatch] = []
        self.log: list[str] = []
        self.seq = 0

    def append_soon(self, run_id: str, attempt: int | None, batch: EventBatch,
                    done: Done) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.out.append((batch, done, future))
        return future

    def answer(self, error: BaseException | None = None) -> EventBatch:
        batch, done, future = self.out.pop(0)
        if error is None:
            self.seq += len(batch.events)
            self.log += _names(batch)
            done(self.seq, None)
        else:
            done(0, error)
        future.set_result(None)
        return batch

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        await asyncio.sleep(0)
        self.by_writer.append(batch)
        self.seq += len(batch.events)
        self.log += _names(batch)
        return self.seq


async def _steps(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _turn(n: int) -> Any:
    return TurnStart(turn=n)


def _end() -> Any:
    return AgentEnd(stop_reason="stop", error=None, usage=Usage(), messages=[])


def _turns(batch: EventBatch) -> list[int]:
    return [int(body.split(b'"turn":', 1)[1].split(b",")[0].rstrip(b"}")) for _, body in
            batch.events]


def _names(batch: EventBatch) -> list[str]:
    """``turn <n>`` for each turn_start, the type for anything else."""
    return [f"turn {_turns(EventBatch(events=[(t, body)]))[0]}" if t == "turn_start" else t
            for t, body in batch.events]


async def test_one_write_out_at_a_time_and_its_answer_sends_the_rest() -> None:
    store = AnsweringStore()
    sink = EventSink(store, "r", 1)  # type: ignore[arg-type]
    sink.emit(_turn(1))
    await _steps()
    assert [_turns(b) for b, _, _ in store.out] == [[1]]  # sent from the loop, no writer
    sink.emit(_turn(2))
    sink.emit(_turn(3))
    await _steps()
    assert len(store.out) == 1  # the first is still out: the next waits for its answer
    store.answer()
    await _steps()
    assert [_turns(b) for b, _, _ in store.out] == [[2, 3]] and sink.last_seq == 1
    store.answer()
    sink.emit(_end())
    await asyncio.wait_for(sink.close(), 5.0)
    assert sink.last_seq == 4 and sink.written == 4 and not store.out
    assert store.log == ["turn 1", "turn 2", "turn 3", "agent_end"]
    assert [b.events[0][0] for b in store.by_writer] == ["agent_end"]  # the end: the writer


async def test_a_failed_write_is_retried_by_the_writer_before_anything_newer() -> None:
    store = AnsweringStore()
    sink = EventSink(store, "r", 1)  # type: ignore[arg-type]
    sink.emit(_turn(1))
    await _steps()
    failed = store.answer(BackendError("redis: connection lost"))
    sink.emit(_turn(2))
    await _steps(6)
    assert store.by_writer and store.by_writer[0] is failed  # same batch, same token
    assert failed.token is not None
    while store.out:  # the newer event goes out after the retry, in place again
        store.answer()
        await _steps()
    sink.emit(_end())
    await asyncio.wait_for(sink.close(), 5.0)
    assert store.log == ["turn 1", "turn 2", "agent_end"] and sink.last_seq == 3


async def test_a_fenced_write_ends_the_sink() -> None:
    store = AnsweringStore()
    sink = EventSink(store, "r", 1)  # type: ignore[arg-type]
    sink.emit(_turn(1))
    await _steps()
    store.answer(FencedOut("attempt 1 is stale"))
    sink.emit(_end())
    with pytest.raises(FencedOut):
        await asyncio.wait_for(sink.close(), 5.0)
    assert store.log == [] and not store.by_writer


async def test_a_fast_stream_keeps_the_flush_interval() -> None:
    store = AnsweringStore()
    sink = EventSink(store, "r", 1, flush_interval=10.0)  # type: ignore[arg-type]
    sink.emit(_turn(1))  # the first after a quiet spell: at once, in place
    await _steps()
    store.answer()
    sink.emit(_turn(2))  # within the interval: not in place; the writer holds it ...
    await _steps(6)
    assert not store.out and not store.by_writer
    sink.emit(_end())
    await asyncio.wait_for(sink.close(), 5.0)  # ... until the run closes
    assert [[t for t, _ in b.events] for b in store.by_writer] == [["turn_start", "agent_end"]]
    assert store.log == ["turn 1", "turn 2", "agent_end"]


class LaterStore(AnsweringStore):
    """A backend that has ``append_soon`` but cannot use it (Redis off its lean connection)."""

    def append_soon(self, run_id: str, attempt: int | None, batch: EventBatch,
                    done: Done) -> asyncio.Future[Any] | None:  # type: ignore[override]
        self.refused = getattr(self, "refused", 0) + 1
        return None


async def test_a_backend_that_cannot_send_in_place_is_written_by_the_writer() -> None:
    store = LaterStore()
    sink = EventSink(store, "r", 1)  # type: ignore[arg-type]
    for n in (1, 2, 3):
        sink.emit(_turn(n))
        await _steps(6)
    sink.emit(_end())
    await asyncio.wait_for(sink.close(), 5.0)
    assert store.refused == 1  # asked once, then the writer writes everything
    assert store.log == ["turn 1", "turn 2", "turn 3", "agent_end"] and sink.last_seq == 4
