"""The lean notes reader (``redis_notes_reader``): notes read in the connection's callback, and
a lost connection handled as any outage (waiters woken to re-read, notes flowing again)."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from app.store.redis.backend import RedisBackend
from app.store.redis.notes_reader import command, lean_params
from tests.backends.helpers import batch, created_and_claimed


def test_commands_are_resp_arrays_and_tls_keeps_redis_py() -> None:
    assert command("SUBSCRIBE", b"al:notify") == b"*2\r\n$9\r\nSUBSCRIBE\r\n$9\r\nal:notify\r\n"
    assert lean_params(Redis.from_url("rediss://127.0.0.1:6380/0")) is None
    plain = lean_params(Redis.from_url("redis://u:p%40ss@10.0.0.1:6390/2"))
    assert plain is not None
    assert (plain.host, plain.port, plain.username, plain.password) == (
        "10.0.0.1", 6390, "u", "p@ss")
    unix = lean_params(Redis.from_url("unix:///tmp/r.sock"))
    assert unix is not None and unix.path == "/tmp/r.sock"


async def test_notes_flow_again_after_the_notes_connection_is_killed(
        redis_backend: RedisBackend) -> None:
    backend = redis_backend
    claim = await created_and_claimed(backend)
    assert lean_params(backend.client) is not None  # type: ignore[arg-type]
    await backend.append_events(claim.run_id, claim.attempt, batch("a"))
    assert [e.seq for e in await backend.wait_events(claim.run_id, 0, 5.0)] == [1]
    waiter = asyncio.create_task(backend.wait_events(claim.run_id, 1, 30.0))
    await asyncio.sleep(0.05)
    killed = await backend.client.client_kill_filter(_type="pubsub")
    assert killed >= 1
    # woken by the reconnect (it re-reads and finds nothing), or later by the note: either way
    # the next event arrives well before the 30 s wait would end
    deadline = asyncio.get_running_loop().time() + 20
    seen: list[int] = []
    while not seen:
        if waiter.done():
            seen = [e.seq for e in waiter.result()]
            if not seen:
                waiter = asyncio.create_task(backend.wait_events(claim.run_id, 1, 30.0))
        await backend.append_events(claim.run_id, claim.attempt, batch("b"))
        await asyncio.sleep(0.2)
        assert asyncio.get_running_loop().time() < deadline
    assert seen[0] == 2
