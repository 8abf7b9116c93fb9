"""Live SSE frames on every backend (``feeds``, ``app.delivery.tap``): a subscriber that keeps up is
handed each event's frame once, in order, without re-reading the log per batch; what a note
does not carry (a big batch) is read from the log."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from app.delivery.tap import tapped_frames
from app.store import Backend
from app.store.live_feed import LiveFeeds
from app.store.records import EventBatch
from tests.backends.helpers import batch, created_and_claimed

_ID = re.compile(rb"^id: (\d+)$", re.M)
_END = (b'{"run_id":"r","ts":"t","type":"agent_end","stop_reason":"stop","error":null,'
        b'"depth":0}')


async def _tail(backend: Backend, run_id: str, until: int) -> list[int]:
    """The seqs streamed; ``poll`` long, so an idle re-read of the log never stands in for a
    missed wake-up within the tests' time."""
    feeds = getattr(backend, "feeds", None)
    assert isinstance(feeds, LiveFeeds)
    seqs: list[int] = []
    async for chunk in tapped_frames(backend, feeds, run_id, 0, 120.0, None, b""):
        seqs += [int(m) for m in _ID.findall(chunk)]
        if seqs and seqs[-1] >= until:
            break
    return seqs


def _counting_reads(backend: Backend) -> list[int]:
    reads: list[int] = []
    original = backend.read_events

    async def counting(run_id: str, after: int, limit: int = 1000) -> Any:
        reads.append(after)
        return await original(run_id, after, limit)

    backend.read_events = counting  # type: ignore[method-assign]
    return reads


async def test_a_subscriber_that_keeps_up_gets_every_frame_once(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    reads = _counting_reads(backend)
    tail = asyncio.create_task(_tail(backend, claim.run_id, 41))
    while not backend.feeds.watched(claim.run_id) or not reads:  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)
    for n in range(20):
        await backend.append_events(claim.run_id, claim.attempt, batch(f"a{n}", f"b{n}"))
        await asyncio.sleep(0.005)
    await backend.append_events(claim.run_id, claim.attempt,
                                EventBatch(events=[("agent_end", _END)]))
    seqs = await asyncio.wait_for(tail, 30)
    assert seqs == list(range(1, 42))
    assert len(reads) <= 3  # the catch-up read at the start, not one per batch


async def test_a_batch_too_big_for_its_note_comes_from_the_log(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    tail = asyncio.create_task(_tail(backend, claim.run_id, 4))
    while not backend.feeds.watched(claim.run_id):  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)
    await backend.append_events(claim.run_id, claim.attempt, batch("first"))
    big = batch("x" * 70_000, "small")  # the last batch: no later frame shows a gap
    big.events.append(("agent_end", _END))
    await backend.append_events(claim.run_id, claim.attempt, big)
    assert await asyncio.wait_for(tail, 30) == [1, 2, 3, 4]
