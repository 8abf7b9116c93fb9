"""Redis notes carry each batch, so a tail that keeps up never re-reads the log."""

from __future__ import annotations

import asyncio

import pytest

from app.store.records import StoredEvent
from app.store.redis.backend import RedisBackend
from app.store.redis.notify import parse_batch, parse_head
from tests.backends.helpers import batch, created_and_claimed


async def test_a_tail_that_keeps_up_reads_the_log_once(redis_backend: RedisBackend) -> None:
    backend = redis_backend
    claim = await created_and_claimed(backend)
    reads = 0
    original = backend.read_events

    async def counting(run_id: str, after: int, limit: int = 1000):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return await original(run_id, after, limit)

    backend.read_events = counting  # type: ignore[method-assign]
    seen: list[int] = []

    async def tail() -> None:
        after = 0
        while after < 40:
            for event in await backend.wait_events(claim.run_id, after, 5.0):
                seen.append(event.seq)
                after = event.seq

    reader = asyncio.create_task(tail())
    await asyncio.sleep(0.05)
    for n in range(20):
        await backend.append_events(claim.run_id, claim.attempt, batch(f"a{n}", f"b{n}"))
        await asyncio.sleep(0.005)
    await asyncio.wait_for(reader, 5)
    assert seen == list(range(1, 41))
    assert reads <= 2  # the first look, and at most one more; not one per batch


async def test_a_big_batch_is_announced_without_its_events(redis_backend: RedisBackend
                                                             ) -> None:
    backend = redis_backend
    claim = await created_and_claimed(backend)
    big = "x" * 70_000
    waiter = asyncio.create_task(backend.wait_events(claim.run_id, 0, 5.0))
    await asyncio.sleep(0.05)
    await backend.append_events(claim.run_id, claim.attempt, batch(big, "small"))
    events = await asyncio.wait_for(waiter, 5)
    assert [e.seq for e in events] == [1, 2] and big.encode() in events[0].data


def test_notes_parse_and_refuse_what_they_cannot_prove() -> None:
    note = b'e:run_1:3:4\n3\tturn_start\t{"seq":3}\n4\tturn_end\t{"seq":4}'
    head = parse_head(note)
    assert head is not None and head[:4] == ("e", "run_1", 3, 4)
    found = parse_batch(*head[2:])
    assert found is not None and [(e.seq, e.type, e.data) for e in found] == [
        (3, "turn_start", b'{"seq":3}'), (4, "turn_end", b'{"seq":4}')]
    assert parse_batch(3, 4, b"") is None  # a note without its batch
    assert parse_batch(3, 5, b'3\tx\t{}\n5\tx\t{}') is None  # a gap
    assert parse_head(b"c:run_1") == ("c", "run_1", 0, 0, b"")
    assert parse_head(b"x:run_1:3") is None
    with pytest.raises(ValueError):
        parse_batch(3, 4, b"not a line")


async def test_a_note_is_read_past_its_head_only_for_a_run_followed_here(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``--processes N`` every process hears every other's notes: a batch nobody here
    follows is never parsed, one a tail here watches is kept, and a malformed batch of a
    watched run still wakes its waiters, who then read the log."""
    from app.store.redis import notify

    parsed: list[int] = []
    real = notify.parse_batch

    def counting(first: int, last: int, rest: bytes) -> list[StoredEvent] | None:
        parsed.append(first)
        return real(first, last, rest)

    async def recheck(run_id: str) -> bool:
        return False

    monkeypatch.setattr(notify, "parse_batch", counting)
    notes = notify.Notifier(None, recheck)
    notes._note(b'e:run_other:3:3\n3\tx\t{"seq":3}')
    assert parsed == [] and notes.watch("run_other") is None

    assert notes.watch("run_1") is None
    waiter = notes.events_waiter("run_1")
    notes._note(b'e:run_1:1:2\n1\tx\t{"seq":1}\n2\ty\t{"seq":2}')
    assert parsed == [1] and waiter.is_set()
    found = notes.events_after("run_1", 0)
    assert found is not None and [(e.seq, e.type) for e in found] == [(1, "x"), (2, "y")]

    waiter = notes.events_waiter("run_1")
    notes._note(b"e:run_1:3:3\nnot a line")
    assert parsed == [1, 3] and waiter.is_set()
    assert notes.watch("run_1") == 3 and notes.events_after("run_1", 2) is None
