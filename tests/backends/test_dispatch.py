"""Dispatch: claims, heartbeats keeping a lease, takeover after a lapsed lease, release for a
prompt resume, TTL after finish, and the cancel signal's latency."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.store import Backend
from app.store.memory.backend import MemoryBackend
from app.store.redis import keys
from tests.backends.conftest import LEASE
from tests.backends.helpers import created_and_claimed, record


async def test_claim_returns_none_when_idle(backend: Backend) -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await backend.claim("w1", timeout=0.2) is None
    assert loop.time() - t0 < 1.0


async def test_heartbeat_keeps_the_lease_and_lapse_hands_over(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    for _ in range(4):  # 1.2 s > lease, kept alive by heartbeats
        await asyncio.sleep(LEASE * 0.3)
        await backend.heartbeat("w1")
    assert await backend.claim("w2", timeout=0.1) is None
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    taken = await backend.claim("w2", timeout=LEASE * 3)
    assert taken is not None and taken.run_id == claim.run_id
    assert taken.attempt == 2 and taken.resumed
    assert loop.time() - t0 < LEASE * 1.5
    await backend.heartbeat("w1")  # the stale worker cannot take it back
    rec = await backend.get_run(claim.run_id)
    assert rec is not None and rec.worker == "w2"


async def test_finish_sets_ttl_and_is_not_claimed_again(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    assert await backend.expires_in(claim.run_id) is None  # type: ignore[attr-defined]
    await backend.update_run(claim.run_id, 1, status="completed")
    await backend.finish(claim.run_id, claim.attempt)
    ttl = await backend.expires_in(claim.run_id)  # type: ignore[attr-defined]
    assert ttl is not None and 3500 < ttl <= 3600
    await asyncio.sleep(LEASE * 1.2)
    assert await backend.claim("w2", timeout=0.1) is None


async def test_runs_are_claimed_once_each(backend: Backend) -> None:
    ids = {(await backend.create_run(record()))[0].id for _ in range(10)}
    claims = await asyncio.gather(*[backend.claim(f"w{i % 3}", timeout=0.5) for i in range(12)])
    got = [c.run_id for c in claims if c is not None]
    assert sorted(got) == sorted(ids)


async def test_a_waiting_run_is_taken_even_past_the_timeout(backend: Backend) -> None:
    # a claim slowed past its timeout (a starved loop) must still take what is waiting: in a
    # loaded full run 12 cluster claims of 0.5 s each came back empty with 10 runs queued
    ids = {(await backend.create_run(record()))[0].id for _ in range(3)}
    got = [await backend.claim("w1", timeout=0) for _ in range(3)]
    assert sorted(c.run_id for c in got if c is not None) == sorted(ids)
    assert await backend.claim("w1", timeout=0) is None


async def test_cancel_reaches_the_watcher_within_100ms(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    assert not await backend.cancel_requested(claim.run_id)
    watcher = asyncio.create_task(backend.wait_cancel(claim.run_id))
    await asyncio.sleep(0.1)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await backend.request_cancel(claim.run_id)
    await asyncio.wait_for(watcher, 1)
    latency = loop.time() - t0
    print(f"cancel latency ({backend.name}): {latency * 1000:.1f} ms")
    assert latency < 0.1
    assert await backend.cancel_requested(claim.run_id)
    await asyncio.wait_for(backend.wait_cancel(claim.run_id), 1)  # already asked: at once


async def test_a_claim_carrying_the_record_carries_it_as_claimed(backend: Backend) -> None:
    """The Redis claim reads the run in its own step, so the worker needs no read of its own:
    that record is the run as a read right after the claim finds it (attempt, worker). The
    in-process backend carries none (a read there costs no round trip)."""
    rec, _ = await backend.create_run(record(metadata={"k": "v"}))
    claim = await backend.claim("w1", timeout=1.0)
    assert claim is not None and claim.run_id == rec.id
    read = await backend.get_run(rec.id)
    assert read is not None
    if isinstance(backend, MemoryBackend):
        assert claim.record is None
        return
    assert claim.record == read
    assert (claim.record.attempt, claim.record.worker, claim.record.metadata) == (1, "w1",
                                                                                  {"k": "v"})


async def test_a_claim_sets_the_liveness_key_unless_it_was_set_within_a_quarter_lease(
        backend: Backend) -> None:
    """A claim is a heartbeat, but a key set less than a quarter of a lease ago is not set
    again on every claim (a busy worker claims tens of times a second)."""
    if isinstance(backend, MemoryBackend):
        pytest.skip("the in-process backend keeps liveness in memory")
    client: Any = backend.client  # type: ignore[attr-defined]
    key = keys.worker_key("w1")
    await backend.heartbeat("w1")
    await client.delete(key)  # as if it lapsed: only a claim's own write brings it back
    await backend.create_run(record())
    assert await backend.claim("w1", timeout=1.0) is not None
    assert not await client.exists(key)  # set just now by the heartbeat: not again
    await asyncio.sleep(LEASE / 4)
    await backend.create_run(record())
    assert await backend.claim("w1", timeout=1.0) is not None
    assert await client.exists(key)
    assert 0 < await client.pttl(key) <= LEASE * 1000


async def test_a_second_job_entry_never_steals_a_run(backend: Backend) -> None:
    """A run held by a worker, or ended, is not claimed through another entry of its own (a
    retried dispatch or the stranded-run sweep can leave one): the entry is dropped, the
    attempt stays; a takeover of a lapsed holder goes through the holder's own entry."""
    if isinstance(backend, MemoryBackend):
        pytest.skip("one process: no second entry can exist")
    claim = await created_and_claimed(backend)
    add_job: Any = backend._add_job  # type: ignore[attr-defined]
    await add_job(claim.run_id)
    await backend.heartbeat("w1")
    assert await backend.claim("w2", timeout=0.3) is None
    held = await backend.get_run(claim.run_id)
    assert held is not None and (held.attempt, held.worker) == (1, "w1")
    client: Any = backend.client  # type: ignore[attr-defined]
    assert await client.xlen(keys.JOBS_STREAM) == 1  # the duplicate is gone; its own stays
    taken = await backend.claim("w2", timeout=LEASE * 3)  # w1 lapses: its entry moves over
    assert taken is not None and taken.attempt == 2
    await backend.update_run(claim.run_id, 2, status="completed")
    await backend.finish(claim.run_id, 2)
    await add_job(claim.run_id)  # an ended run's duplicate entry
    assert await backend.claim("w3", timeout=0.3) is None
    ended = await backend.get_run(claim.run_id)
    assert ended is not None and ended.attempt == 2
