"""Script calls of one tick share a pipeline, yet each gets its own result or error."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from app.store.redis.pipeline import ScriptPipeline

ECHO = "if ARGV[1] == 'fail' then return redis.error_reply('FENCED') end return ARGV[1]"


@pytest.fixture
def client(redis_client: Redis) -> Redis:
    return redis_client


async def test_one_round_trip_for_a_tick_and_errors_stay_with_their_call(client: Redis) -> None:
    script = client.register_script(ECHO)
    pipeline = ScriptPipeline(client)
    await client.script_flush()  # the first flush meets NOSCRIPT and loads the script itself
    before = await client.info("commandstats")
    calls = [pipeline.call(script, ["k"], [str(n)]) for n in range(20)]
    calls.insert(5, pipeline.call(script, ["k"], ["fail"]))
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[5], ResponseError) and "FENCED" in str(results[5])
    assert [r.decode() for i, r in enumerate(results) if i != 5] == [str(n) for n in range(20)]
    sent = (await client.info("commandstats"))["cmdstat_evalsha"]["calls"]
    first_sent = before.get("cmdstat_evalsha", {"calls": 0})["calls"]
    assert sent - first_sent >= 21  # all of them went by SHA (then again after the load)
    before = (await client.info("commandstats"))["cmdstat_evalsha"]["calls"]
    opened = 0
    real_pipeline = client.pipeline

    def counting_pipeline(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal opened
        opened += 1
        return real_pipeline(*args, **kwargs)

    client.pipeline = counting_pipeline  # type: ignore[method-assign]
    assert await asyncio.gather(*(pipeline.call(script, ["k"], [str(n)]) for n in range(10))) \
        == [str(n).encode() for n in range(10)]
    assert opened == 1  # ten calls of one tick: one pipeline, one round trip
    assert (await client.info("commandstats"))["cmdstat_evalsha"]["calls"] - before == 10
    await pipeline.close()


async def test_a_dead_connection_fails_every_call_of_the_tick() -> None:
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                 retry=Retry(NoBackoff(), 0))
    script = dead.register_script(ECHO)
    pipeline = ScriptPipeline(dead)
    results = await asyncio.gather(*(pipeline.call(script, ["k"], ["x"]) for _ in range(3)),
                                   return_exceptions=True)
    assert all(isinstance(r, Exception) for r in results)
    await pipeline.close()
    await dead.aclose()
