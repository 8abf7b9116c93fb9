"""Crash recovery with real worker processes on Redis and on a Redis Cluster: SIGKILL mid-run
(another worker resumes from the checkpoint, within about 5 s on the default settings), SIGSTOP
past the lease (the stale worker is fenced out). Every step waits on an event (a log entry, a
liveness key, a log line, a gate file the test opens), never on a guessed duration: these hold
on a loaded machine."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.store import Backend
from tests.engine.harness import events, new_record, wait_end, wait_event
from tests.engine.processes import spawn_worker, stop_all, wait_alive, wait_line
from tests.engine.resumable import assert_clean_log
from tests.support.redis_cluster import is_cluster
from tests.support.stores import started_backend

pytestmark = pytest.mark.timeout(240)
LEASE = 3.0
"""Short enough for a quick test, long enough that a loaded machine never loses a live worker."""


@pytest.fixture(params=["redis", "cluster"])
def store_url(request: pytest.FixtureRequest) -> str:
    """One Redis, or the test cluster's seed list."""
    return str(request.getfixturevalue("redis_url" if request.param == "redis" else "cluster_url"))


@pytest.fixture
async def rbackend(store_url: str) -> AsyncIterator[Backend]:
    async with started_backend(store_url, lease=LEASE, cluster=is_cluster(store_url)) as b:
        yield b


async def wait_tool_start(backend: Backend, run_id: str, name: str) -> None:
    after = 0
    async with asyncio.timeout(60):
        while True:
            for e in await backend.wait_events(run_id, after, timeout=1):
                after = e.seq
                if e.type == "tool_execution_start" and b'"tool_name":"%s"' % name.encode() \
                        in e.data:
                    return


async def kill_during_nap(rbackend: Backend, redis_url: str, tmp_path: Path,
                          lease: float | None) -> tuple[str, float]:
    """A holds the run in ``nap`` (gated shut), B is alive, A is killed: (run id, seconds from
    the kill to ``run_resumed``)."""
    marks = tmp_path / "marks"
    gate = {"AGENTLOOP_TEST_GATE": str(tmp_path / "never")}
    a = spawn_worker(redis_url, "A", marks, lease=lease, nap=0.2, extra_env=gate)
    b = None
    try:
        await wait_alive(redis_url, "A")
        rec, _ = await rbackend.create_run(new_record())
        await wait_tool_start(rbackend, rec.id, "nap")
        b = spawn_worker(redis_url, "B", marks, lease=lease, nap=0.2)
        await wait_alive(redis_url, "B")
        loop = asyncio.get_running_loop()
        a.send_signal(signal.SIGKILL)
        t_kill = loop.time()
        await wait_event(rbackend, rec.id, "run_resumed", timeout=60)
        took = loop.time() - t_kill
        await wait_end(rbackend, rec.id, timeout=60)
    finally:
        stop_all(a, *([b] if b else []))
    assert marks.read_text().splitlines() == ["mark:1"]  # checkpointed: not run again
    return rec.id, took


async def test_sigkill_mid_run_resumes_on_another_worker(rbackend: Backend, store_url: str,
                                                         tmp_path: Path) -> None:
    run_id, took = await kill_during_nap(rbackend, store_url, tmp_path, LEASE)
    print(f"claim after kill: {took:.2f}s (lease {LEASE}s)")
    assert took < LEASE + 10  # the lease, a scan, a claim: generous for a loaded machine
    end = await rbackend.get_run(run_id)
    assert end is not None and (end.status, end.result, end.attempt) == ("completed", "done", 2)
    log = await events(rbackend, run_id)
    assert_clean_log(log)
    resumed = [e for e in log if e["type"] == "run_resumed"]
    assert len(resumed) == 1 and resumed[0]["worker"] == "B" and resumed[0]["attempt"] == 2
    ckpt = await rbackend.load_checkpoint(run_id)
    assert [m["role"] for m in ckpt] == ["user", "assistant", "tool_result", "assistant",
                                         "tool_result", "assistant"]


async def test_a_killed_workers_run_continues_within_about_5_s_on_the_defaults(
        rbackend: Backend, store_url: str, tmp_path: Path) -> None:
    """Default lease (5 s) and heartbeat (1 s): main took 26.8 s with its 30 s lease."""
    run_id, took = await kill_during_nap(rbackend, store_url, tmp_path, None)
    print(f"takeover on the defaults: {took:.2f}s")
    assert 3.5 < took < 8.0  # lease 5 s minus at most one heartbeat, plus one 0.5 s scan
    end = await rbackend.get_run(run_id)
    assert end is not None and (end.status, end.result) == ("completed", "done")


async def test_sigstop_past_the_lease_is_fenced_out(rbackend: Backend, store_url: str,
                                                     tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    gate_a, gate_b, log_a = tmp_path / "gate_a", tmp_path / "gate_b", tmp_path / "a.log"
    a = spawn_worker(store_url, "A", marks, lease=LEASE, log=log_a,
                     extra_env={"AGENTLOOP_TEST_GATE": str(gate_a)})
    b = None
    try:
        await wait_alive(store_url, "A")
        rec, _ = await rbackend.create_run(new_record())
        await wait_tool_start(rbackend, rec.id, "nap")
        b = spawn_worker(store_url, "B", marks, lease=LEASE,
                         extra_env={"AGENTLOOP_TEST_GATE": str(gate_b)})
        await wait_alive(store_url, "B")
        a.send_signal(signal.SIGSTOP)
        await wait_event(rbackend, rec.id, "run_resumed", timeout=60)
        a.send_signal(signal.SIGCONT)  # A wakes inside B's run: its writes must be refused
        gate_a.touch()  # A's nap ends: it tries to write its result
        await wait_line(log_a, "fenced out")
        gate_b.touch()
        end = await wait_end(rbackend, rec.id, timeout=60)
        assert a.poll() is None  # A stopped that run quietly and lives on
        a.send_signal(signal.SIGTERM)
        assert a.wait(60) == 0
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
        stop_all(a, *([b] if b else []))
    assert (end.status, end.result) == ("completed", "done")
    log = await events(rbackend, rec.id)
    assert_clean_log(log)
    nap_ends = [e for e in log if e["type"] == "tool_execution_end" and
                e["tool_call_id"] == "call_nap"]
    # B closed A's interrupted call as lost, then ran it; A's own end was fenced out
    assert [e["is_error"] for e in nap_ends] == [True, False]
    assert "worker" in str(nap_ends[0]["result"]) and "lost" in str(nap_ends[0]["result"])
