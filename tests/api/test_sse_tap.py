"""The tapped SSE stream (``app.delivery.tap``): frames handed over at append, the log read
whenever they do not follow on; every seq exactly once, in order, whatever the timing."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from app.delivery.sse import PAGE
from app.delivery.tap import tapped_frames
from app.engine.events import AgentEnd, Event, TurnStart, encode_event_body, utc_now
from app.store import live_feed
from app.store.memory.backend import MemoryBackend
from app.store.records import EventBatch, StoredEvent
from providers.messages import Usage
from tests.engine.harness import new_record

_ID = re.compile(rb"^id: (\d+)$", re.M)


def _batch(run_id: str, events: list[Event]) -> EventBatch:
    return EventBatch(events=[(e.type, encode_event_body(e, run_id=run_id, ts=utc_now()))
                              for e in events])


def _turns(first: int, count: int) -> list[Event]:
    return [TurnStart(turn=n) for n in range(first, first + count)]


def _end() -> AgentEnd:
    return AgentEnd(stop_reason="stop", error=None, usage=Usage(), messages=[])


async def _run(backend: MemoryBackend) -> str:
    """A run whose log holds seq 1 (turn 0)."""
    record, _ = await backend.create_run(new_record())
    await backend.append_events(record.id, None, _batch(record.id, [TurnStart(turn=0)]))
    return record.id


async def _stream(backend: MemoryBackend, run_id: str, after: int = 0,
                  first: list[StoredEvent] | None = None, poll: float = 5.0
                  ) -> AsyncIterator[bytes]:
    return tapped_frames(backend, backend.feeds, run_id, after, poll, first, b"retry: 1\n")


async def _collect(frames: AsyncIterator[bytes]) -> tuple[list[int], bytes]:
    chunks = [chunk async for chunk in frames]
    raw = b"".join(chunks)
    return [int(m) for m in _ID.findall(raw)], raw


async def test_handoff_from_a_stale_first_page_is_gapless_and_sends_nothing_twice() -> None:
    backend = MemoryBackend()
    run_id = await _run(backend)
    await backend.append_events(run_id, None, _batch(run_id, _turns(1, 3)))
    first = await backend.read_events(run_id, 0, PAGE)  # the route's read: seqs 1..4
    # appended after the route's read and before the tap opens: only the log has them
    await backend.append_events(run_id, None, _batch(run_id, _turns(4, 3)))
    frames = await _stream(backend, run_id, 0, first)

    async def produce() -> None:
        for n in range(7, 40):
            await backend.append_events(run_id, None, _batch(run_id, [TurnStart(turn=n)]))
            await asyncio.sleep(0)
        await backend.append_events(run_id, None, _batch(run_id, [_end()]))

    (seqs, raw), _ = await asyncio.gather(_collect(frames), produce())
    assert seqs == list(range(1, 42))
    assert raw.startswith(b"retry: 1\nid: 1\nevent: turn_start\n")
    assert raw.endswith(b"\n\n") and b"event: agent_end" in raw.rsplit(b"id: ", 1)[1]


async def test_a_tap_that_skips_seqs_reads_the_log_and_drops_what_was_sent() -> None:
    backend = MemoryBackend()
    run_id = await _run(backend)
    frames = await _stream(backend, run_id)
    assert _ID.findall(await anext(frames) + await anext(frames)) == [b"1"]  # retry, seq 1
    # the log gets 2..5 but the tap is handed only 4..5 (a lost note), then 2..5 again
    stored = await _append_quietly(backend, run_id, _turns(1, 4))
    backend.feeds.push(run_id, stored[2:])
    backend.feeds.push(run_id, stored)
    await backend.append_events(run_id, None, _batch(run_id, [_end()]))
    seqs, _ = await _collect(frames)
    assert seqs == [2, 3, 4, 5, 6]


async def _append_quietly(backend: MemoryBackend, run_id: str,
                          events: list[Event]) -> list[StoredEvent]:
    """Append to the log without handing the frames to the taps."""
    feeds, backend.feeds = backend.feeds, live_feed.LiveFeeds()
    try:
        last = await backend.append_events(run_id, None, _batch(run_id, events))
    finally:
        backend.feeds = feeds
    return await backend.read_events(run_id, last - len(events))


async def test_every_subscriber_is_handed_the_same_frame_bytes() -> None:
    backend = MemoryBackend()
    run_id = await _run(backend)
    taps = [backend.feeds.open(run_id, 5.0) for _ in range(3)]
    await backend.append_events(run_id, None, _batch(run_id, _turns(1, 2)))
    taken = [tap.take() for tap in taps]
    assert [seq for seq, _, _ in taken[0]] == [2, 3]
    for a, b in zip(taken[0], taken[1], strict=True):
        assert a[1] is b[1]  # encoded once, shared
    for tap in taps:
        tap.close()
    assert not backend.feeds.watched(run_id)


async def test_a_subscriber_far_behind_falls_back_to_the_log(monkeypatch: object) -> None:
    backend = MemoryBackend()
    run_id = await _run(backend)
    frames = await _stream(backend, run_id)
    assert _ID.findall(await anext(frames) + await anext(frames)) == [b"1"]
    limit = live_feed.MAX_PENDING
    # more frames than a tap holds, appended while the subscriber is not taking them
    for n in range(0, limit + 50):
        await backend.append_events(run_id, None, _batch(run_id, [TurnStart(turn=n)]))
    tap_frames = sum(len(t.pending) for t in backend.feeds._taps[run_id])
    assert tap_frames < limit + 50
    await backend.append_events(run_id, None, _batch(run_id, [_end()]))
    seqs, _ = await _collect(frames)
    assert seqs == list(range(2, limit + 53))


async def test_a_long_log_is_replayed_page_by_page_without_any_new_event() -> None:
    backend = MemoryBackend()
    run_id = await _run(backend)
    await backend.append_events(run_id, None, _batch(run_id, _turns(1, 2 * PAGE + 20)))
    first = await backend.read_events(run_id, 0, PAGE)
    frames = await _stream(backend, run_id, 0, first, poll=60.0)  # no idle re-read to lean on
    seqs: list[int] = []
    async with asyncio.timeout(20):
        async for chunk in frames:
            seqs += [int(m) for m in _ID.findall(chunk)]
            if len(seqs) == 2 * PAGE + 21:
                break
    await frames.aclose()  # type: ignore[attr-defined]
    assert seqs == list(range(1, 2 * PAGE + 22))
    assert not backend.feeds.watched(run_id)  # closing the stream closed its tap


async def test_idle_tap_pings_then_ends_with_the_run() -> None:
    backend = MemoryBackend()
    run_id = await _run(backend)
    frames = await _stream(backend, run_id, poll=0.05)
    assert _ID.findall(await anext(frames) + await anext(frames)) == [b"1"]
    assert await anext(frames) == b": ping\n"
    assert await anext(frames) == b": ping\n"
    await backend.append_events(run_id, None, _batch(run_id, [_end()]))
    seqs, _ = await _collect(frames)
    assert seqs == [2]
