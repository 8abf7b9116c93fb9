"""Scripts loaded on each new lean connection (``LeanScripts.preload``): a Redis that lost its
scripts (restarted: scripts flushed, connections dropped) meets no call before they are back.
A call meeting NOSCRIPT goes through its script object and is done after the calls behind it
in the same write, so without the preload a read made after a write could miss it."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from app.store.redis.backend import RedisBackend
from tests.backends.helpers import batch, created_and_claimed


async def test_a_restarted_redis_gets_the_scripts_before_any_call(
        redis_backend: RedisBackend, redis_client: Redis) -> None:
    claim = await created_and_claimed(redis_backend)
    await redis_client.script_flush()
    await redis_client.client_kill_filter(_type="normal", skipme=True)
    await redis_client.config_resetstat()
    answers: list[tuple[int, BaseException | None]] = []
    written = redis_backend.append_soon(claim.run_id, claim.attempt, batch("a"),
                                        lambda seq, error: answers.append((seq, error)))
    assert written is not None  # the lean connection: a plain URL
    events = await asyncio.wait_for(redis_backend.read_events(claim.run_id, 0), 10)
    await asyncio.wait_for(written, 10)
    assert answers == [(1, None)]
    assert [e.seq for e in events] == [1]  # the read, behind the write, saw it
    assert "errorstat_NOSCRIPT" not in await redis_client.info("errorstats")
