"""Neighbouring calls of one write merged into one call (``app.store.redis.merged_calls``): the
event batches of many runs as one ``APPEND_MANY``, each run's log and answer exactly as its own
``APPEND`` would leave them, one note message for all, against a real redis-server; and the
merging itself (which calls merge, how a merged call answers) on its own."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import DataError, InvalidResponse, ResponseError

from app.engine.events import MessageQueued
from app.store import Claim, EventBatch
from app.store.errors import FencedOut, RunEnded
from app.store.redis import merged_calls
from app.store.redis.backend import RedisBackend
from app.store.redis.keys import NOTIFY_CHANNEL
from app.store.redis.lean_scripts import LeanScripts
from app.store.redis.merged_calls import Merged, merge, merged_call
from app.store.redis.notes_reader import lean_params
from tests.backends.helpers import batch, created_and_claimed

ECHO = "if ARGV[1] == 'fail' then return redis.error_reply('FENCED') end return ARGV[1]"
ECHO_MANY = """
local out = {}
for r = 1, tonumber(ARGV[1]) do
  if ARGV[r + 1] == 'fail' then out[r] = redis.error_reply('FENCED') else out[r] = ARGV[r + 1] end
end
return out
"""
"""ECHO's merged form: one key and one argument per call."""

Answers = list[tuple[int, BaseException | None]]


def _evalsha_calls(stats: dict[str, Any]) -> int:
    return int(stats.get("cmdstat_evalsha", {"calls": 0})["calls"])


def _append(backend: RedisBackend, claim: Claim, events: EventBatch, answers: Answers,
            attempt: int | None = None) -> asyncio.Future[Any]:
    future = backend.append_soon(claim.run_id, claim.attempt if attempt is None else attempt,
                                 events, lambda seq, error: answers.append((seq, error)))
    assert future is not None  # the lean connection: a plain URL
    return future


async def test_batches_of_one_write_are_one_call_each_answered_as_by_its_own(
        redis_backend: RedisBackend, redis_client: Redis) -> None:
    """Five runs' batches in one tick: one EVALSHA; each run's log, seqs and answer are what
    its own APPEND gives, a stale attempt's batch is refused alone (FENCED), an ended run's
    too (ENDED), and one run's two batches keep their order."""
    claims = [await created_and_claimed(redis_backend) for _ in range(5)]
    ended = claims[4]
    await redis_backend.append_events(ended.run_id, ended.attempt,
                                      EventBatch(events=[], fields={"status": "completed"}))
    before = _evalsha_calls(await redis_client.info("commandstats"))
    answers: list[Answers] = [[] for _ in claims]
    futures = [_append(redis_backend, claims[0], batch("a1", "a2"), answers[0]),
               _append(redis_backend, claims[1], batch("b1"), answers[1]),
               _append(redis_backend, claims[2], batch("stale"), answers[2],
                       attempt=claims[2].attempt - 1),
               _append(redis_backend, claims[0], batch("a3"), answers[0]),
               _append(redis_backend, claims[3], batch("d1", token="tok"), answers[3]),
               _append(redis_backend, claims[4], batch("late"), answers[4])]
    await asyncio.wait(futures)
    assert _evalsha_calls(await redis_client.info("commandstats")) - before == 1
    assert answers[0] == [(2, None), (3, None)]  # a1, a2 then a3
    assert answers[1] == [(1, None)]
    assert answers[2][0][0] == 0 and isinstance(answers[2][0][1], FencedOut)
    assert answers[3] == [(1, None)]
    assert answers[4][0][0] == 0 and isinstance(answers[4][0][1], RunEnded)
    logs = [[(e.seq, e.data) for e in await redis_backend.read_events(c.run_id, 0)]
            for c in claims]
    assert [seq for seq, _ in logs[0]] == [1, 2, 3]
    assert all(b'"text":"a%d"' % n in data for n, (_, data) in zip((1, 2, 3), logs[0],
                                                                     strict=True))
    assert [seq for seq, _ in logs[1]] == [1] and logs[2] == [] and logs[4] == []
    # the token kept with the batch: the same batch sent again is not written twice
    again: Answers = []
    await asyncio.wait([_append(redis_backend, claims[3], batch("d1", token="tok"), again),
                        _append(redis_backend, claims[1], batch("b2"), answers[1])])
    assert again == [(1, None)] and answers[1][-1] == (2, None)
    assert len(await redis_backend.read_events(claims[3].run_id, 0)) == 1


async def test_the_notes_of_one_call_are_one_message_that_feeds_every_run(
        redis_backend: RedisBackend, redis_client: Redis) -> None:
    """The batches' notes go out as one message (``m``, then the notes), and this process's
    listener hands each run its own batch from it: a tail caught up takes it from the note."""
    claims = [await created_and_claimed(redis_backend) for _ in range(3)]
    notes = redis_backend.notifier
    for claim in claims:
        await notes.follow(claim.run_id)
        notes.watch(claim.run_id)
    waiters = [notes.events_waiter(c.run_id) for c in claims]
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(NOTIFY_CHANNEL)
    try:
        answers: Answers = []
        await asyncio.wait([_append(redis_backend, c, batch(f"{n}-x", f"{n}-y"), answers)
                            for n, c in enumerate(claims)])
        message = None
        while message is None:
            message = await pubsub.get_message(timeout=10)
    finally:
        await pubsub.aclose()
    data = message["data"]
    assert data.startswith(b"m\n\n")
    heads = [part.split(b"\n", 1)[0] for part in data[3:].split(b"\n\n")]
    assert heads == [f"e:{c.run_id}:1:2".encode() for c in claims]
    await asyncio.wait_for(asyncio.gather(*(w.wait() for w in waiters)), 10)
    for n, claim in enumerate(claims):
        fed = notes.events_after(claim.run_id, 0)
        assert fed is not None and [e.seq for e in fed] == [1, 2]
        assert f'"text":"{n}-y"'.encode() in fed[1].data
        assert fed == (await redis_backend.read_events(claim.run_id, 0))


async def test_a_restarted_redis_gets_the_scripts_before_any_call(
        redis_backend: RedisBackend, redis_client: Redis) -> None:
    """Scripts are loaded on each new lean connection: after Redis lost them (a restart: its
    scripts flushed, its connections dropped) the next write meets no NOSCRIPT, so a merged
    call is not done after the call behind it (a service event keeps its place)."""
    claim = await created_and_claimed(redis_backend)
    await redis_client.script_flush()
    await redis_client.client_kill_filter(_type="normal", skipme=True)
    await redis_client.config_resetstat()
    answers: Answers = []
    futures = [_append(redis_backend, claim, batch("a"), answers),
               _append(redis_backend, claim, batch("b"), answers)]
    seq = await asyncio.wait_for(redis_backend.append_service_event(
        claim.run_id, MessageQueued(message_id="m1", kind="steer")), 10)
    await asyncio.wait(futures)
    assert answers == [(1, None), (2, None)] and seq == 3
    stats = await redis_client.info("errorstats")
    assert "errorstat_NOSCRIPT" not in stats


@pytest.fixture
async def echo(redis_client: Redis) -> Any:
    params = lean_params(redis_client)
    assert params is not None
    scripts = LeanScripts(redis_client, params, timeout=5.0)
    try:
        yield scripts, redis_client.register_script(ECHO), Merged(
            redis_client.register_script(ECHO_MANY))
    finally:
        await scripts.close()


async def test_a_call_that_cannot_be_sent_fails_alone(echo: Any, redis_client: Redis) -> None:
    """One call's arguments cannot be sent (a bool): the merged call is not sent, its parts go
    one by one, only that one fails. A merged call meeting NOSCRIPT (scripts flushed by hand)
    runs through its script object and still answers each part."""
    scripts, script, how = echo
    values: list[Any] = ["a", "b", True, "fail", "c"]
    results = await asyncio.gather(*(scripts.call_soon(script, ["k"], [v], merge=how)
                                     for v in values), return_exceptions=True)
    assert results[:2] == [b"a", b"b"] and results[4] == b"c"
    assert isinstance(results[2], DataError)
    assert isinstance(results[3], ResponseError) and "FENCED" in str(results[3])
    await redis_client.script_flush()
    before = _evalsha_calls(await redis_client.info("commandstats"))
    results = await asyncio.gather(*(scripts.call_soon(script, ["k"], [v], merge=how)
                                     for v in ("x", "fail", "y")), return_exceptions=True)
    assert results[0] == b"x" and results[2] == b"y"
    assert isinstance(results[1], ResponseError) and "FENCED" in str(results[1])
    # the merged call thrice (NOSCRIPT; the script object's try, NOSCRIPT; after it loaded
    # the script), not once per part
    assert _evalsha_calls(await redis_client.info("commandstats")) - before == 3


async def test_a_merged_call_on_a_dropped_connection_is_sent_again_whole(
        echo: Any, redis_client: Redis) -> None:
    scripts, script, how = echo
    assert await scripts.call(script, ["k"], ["warm"]) == b"warm"
    await redis_client.client_kill_filter(_type="normal", skipme=True)
    results = await asyncio.gather(*(scripts.call_soon(script, ["k"], [str(n)], merge=how)
                                     for n in range(4)))
    assert results == [b"0", b"1", b"2", b"3"]


@dataclass(eq=False)
class _Part:
    """A stand-in for ``lean_scripts._Call`` (what ``merge`` reads)."""

    merge: Merged | None
    keys: list[Any] = field(default_factory=lambda: ["k"])
    args: list[Any] = field(default_factory=lambda: ["v"])
    script: Any = None
    future: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    parts: list[_Part] = field(default_factory=list)


def _merged_of(how: Merged, parts: list[_Part]) -> _Part:
    return _Part(None, parts=parts)


async def test_only_neighbours_sharing_a_form_merge_and_at_most_most(
        monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = Merged(None), Merged(None)  # type: ignore[arg-type]
    calls = [_Part(a), _Part(a), _Part(None), _Part(a), _Part(b), _Part(b), _Part(b), _Part(a)]
    out = merge(calls, _merged_of)
    assert [len(c.parts) for c in out] == [2, 0, 0, 3, 0]
    assert out[0].parts == calls[:2] and out[1] is calls[2] and out[2] is calls[3]
    assert out[3].parts == calls[4:7] and out[4] is calls[7]
    monkeypatch.setattr(merged_calls, "MOST", 2)
    out = merge([_Part(a) for _ in range(5)], _merged_of)
    assert [len(c.parts) for c in out] == [2, 2, 0]


async def test_a_merged_call_answers_each_part_and_its_failure_fails_each() -> None:
    loop = asyncio.get_running_loop()
    parts = [_Part(None) for _ in range(3)]
    keys, args, future = merged_call(parts, loop)
    assert keys == ["k"] * 3 and args == [3, "v", "v", "v"]
    parts[1].future.cancel()  # its caller gave up: left as it is
    future.set_result([1, ResponseError("FENCED"), 3])
    await asyncio.sleep(0)
    assert parts[0].future.result() == 1 and parts[2].future.result() == 3
    assert parts[1].future.cancelled()

    parts = [_Part(None) for _ in range(2)]
    _, _, future = merged_call(parts, loop)
    future.set_result([1])  # not one reply per part: a protocol failure for every part
    await asyncio.sleep(0)
    assert all(isinstance(p.future.exception(), InvalidResponse) for p in parts)

    parts = [_Part(None) for _ in range(2)]
    _, _, future = merged_call(parts, loop)
    future.set_exception(ConnectionError("gone"))
    await asyncio.sleep(0)
    assert all(isinstance(p.future.exception(), ConnectionError) for p in parts)
