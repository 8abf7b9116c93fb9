"""Steering / follow-up queues: take moves to in-flight, ack drops, release returns to the head
in order, withdraw refuses taken messages, concurrent takers never share a message."""

from __future__ import annotations

import asyncio

import pytest

from app.store import Backend, EventBatch, QueueItemTaken, RunNotFound
from app.store.errors import BackendError, QueueFull
from app.worker.sink import BackendQueue, EventSink
from tests.backends.helpers import created_and_claimed, msg


async def test_enqueue_list_take_ack(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    assert await backend.enqueue(rid, "steer", msg("s1")) == 1
    assert await backend.enqueue(rid, "steer", msg("s2")) == 2
    assert await backend.enqueue(rid, "follow_up", msg("f1")) == 1
    listed = await backend.list_queue(rid)
    assert [(k, q.id) for k, q in listed] == [("steer", "s1"), ("steer", "s2"),
                                              ("follow_up", "f1")]
    assert listed[0][1].message.content == "s1"
    taken = await backend.take(rid, "steer", "one-at-a-time", attempt=claim.attempt)
    assert [q.id for q in taken] == ["s1"]
    assert await backend.queue_lengths(rid) == {"steer": 1, "follow_up": 1}
    await backend.append_events(rid, claim.attempt, EventBatch(acks=[("steer", "s1")]))
    rest = await backend.take(rid, "steer", "all")
    assert [q.id for q in rest] == ["s2"]
    assert await backend.take(rid, "steer", "all") == []


async def test_release_returns_to_head_in_order(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    for mid in ("a", "b", "c"):
        await backend.enqueue(rid, "follow_up", msg(mid))
    taken = await backend.take(rid, "follow_up", "all")
    await backend.enqueue(rid, "follow_up", msg("d"))
    await backend.release(rid, "follow_up", taken[:2])
    assert [q.id for _, q in await backend.list_queue(rid)] == ["a", "b", "d"]
    # "c" is still in flight: a new claim (crash recovery) returns it to the head
    await backend.release_run(rid, claim.attempt)
    assert await backend.claim("w2", timeout=2) is not None
    assert [q.id for _, q in await backend.list_queue(rid)] == ["c", "a", "b", "d"]


async def test_withdraw(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    await backend.enqueue(rid, "steer", msg("s1"))
    await backend.enqueue(rid, "follow_up", msg("f1"))
    await backend.take(rid, "steer", "all")
    with pytest.raises(QueueItemTaken):
        await backend.withdraw(rid, "s1")
    assert await backend.withdraw(rid, "f1") == "follow_up"
    with pytest.raises(RunNotFound):
        await backend.withdraw(rid, "f1")


async def test_concurrent_takers_never_get_the_same_message(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    for i in range(50):
        await backend.enqueue(rid, "steer", msg(f"m{i}"))
    results = await asyncio.gather(*[backend.take(rid, "steer", "one-at-a-time")
                                     for _ in range(80)])
    ids = [q.id for r in results for q in r]
    assert sorted(ids) == sorted(f"m{i}" for i in range(50))


async def test_take_repeated_with_its_token_answers_the_same_messages(backend: Backend) -> None:
    """A take whose reply was lost (failover, dropped connection) is sent again with the same
    token: it answers what the first call moved to in-flight, and takes nothing more, so no
    message is stranded in flight where the loop never sees it (found by the cluster failover
    test: an accepted steer left in flight, the run ended without it)."""
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    for mid in ("a", "b", "c"):
        await backend.enqueue(rid, "steer", msg(mid))
    first = await backend.take(rid, "steer", "one-at-a-time", claim.attempt, "t1")
    again = await backend.take(rid, "steer", "one-at-a-time", claim.attempt, "t1")
    assert [q.id for q in first] == [q.id for q in again] == ["a"]
    assert [q.message.content for q in again] == ["a"]
    both = await backend.take(rid, "steer", "all", claim.attempt, "t2")
    assert [q.id for q in both] == ["b", "c"]
    assert [q.id for q in await backend.take(rid, "steer", "all", claim.attempt, "t2")] \
        == ["b", "c"]
    await backend.append_events(rid, claim.attempt, EventBatch(acks=[("steer", "b")]))
    # what was acked since is not answered again; a new token takes afresh
    assert [q.id for q in await backend.take(rid, "steer", "all", claim.attempt, "t2")] == ["c"]
    assert await backend.take(rid, "steer", "all", claim.attempt, "t3") == []
    assert await backend.take(rid, "follow_up", "all", claim.attempt, "t1") == []  # per queue


async def test_take_retried_after_a_lost_reply_strands_nothing(backend: Backend) -> None:
    """The loop's take over a store whose first reply is lost: the retry (same token) hands
    the loop the message the lost call took."""
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    await backend.enqueue(rid, "steer", msg("s1"))
    await backend.enqueue(rid, "steer", msg("s2"))
    real = backend.take
    calls: list[str | None] = []

    async def lose_first_reply(*args: object, **kw: object) -> object:
        got = await real(*args, **kw)  # type: ignore[arg-type]
        calls.append(args[4] if len(args) > 4 else kw.get("token"))  # type: ignore[arg-type]
        if len(calls) == 1:
            raise BackendError("connection lost after the command was sent")
        return got

    sink = EventSink(backend, rid, claim.attempt)
    backend.take = lose_first_reply  # type: ignore[method-assign]
    try:
        taken = await BackendQueue(sink, "steer").take("one-at-a-time")
    finally:
        del backend.take  # type: ignore[method-assign]
    assert [q.id for q in taken] == ["s1"]
    assert len(calls) == 2 and calls[0] == calls[1] and calls[0]
    assert [q.id for _, q in await backend.list_queue(rid)] == ["s2"]


async def test_a_limit_counts_both_queues_and_taken_messages_free_room(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    assert await backend.enqueue(rid, "steer", msg("s1"), limit=3) == 1
    assert await backend.enqueue(rid, "follow_up", msg("f1"), limit=3) == 1
    assert await backend.enqueue(rid, "follow_up", msg("f2"), limit=3) == 2
    for kind in ("steer", "follow_up"):
        with pytest.raises(QueueFull) as refused:
            await backend.enqueue(rid, kind, msg("x"), limit=3)  # type: ignore[arg-type]
        assert (refused.value.run_id, refused.value.limit) == (rid, 3)
    assert [q.id for _, q in await backend.list_queue(rid)] == ["s1", "f1", "f2"]
    events = [e.type for e in await backend.read_events(rid, 0)]
    assert events.count("message_queued") == 3  # a refused message writes no event
    # a taken (in-flight) message no longer waits: room for one more
    await backend.take(rid, "steer", "all", attempt=claim.attempt)
    assert await backend.enqueue(rid, "steer", msg("s2"), limit=3) == 1
    with pytest.raises(QueueFull):
        await backend.enqueue(rid, "steer", msg("s3"), limit=3)
    assert await backend.enqueue(rid, "steer", msg("s3")) == 2  # no limit given: none


async def test_racing_enqueues_fill_the_limit_exactly(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    answers = await asyncio.gather(
        *(backend.enqueue(rid, "follow_up", msg(f"m{i}"), limit=5) for i in range(20)),
        return_exceptions=True)
    assert sum(isinstance(a, int) for a in answers) == 5
    assert all(isinstance(a, int | QueueFull) for a in answers), answers
    assert len(await backend.list_queue(rid)) == 5
