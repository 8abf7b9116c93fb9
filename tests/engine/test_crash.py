"""Crash recovery with real worker processes on Redis and on a Redis Cluster: SIGKILL mid-run
(another worker resumes from the checkpoint), SIGSTOP past the lease (the stale worker is
fenced out)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.backends import Backend, make_backend
from tests.engine.harness import events, new_record, wait_end, wait_event
from tests.engine.processes import spawn_worker, stop_all, wait_consumer
from tests.support.redis_cluster import is_cluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["redis", "cluster"])
def store_url(request: pytest.FixtureRequest) -> str:
    """One Redis, or the test cluster's seed list."""
    return str(request.getfixturevalue("redis_url" if request.param == "redis" else "cluster_url"))


@pytest.fixture
async def rbackend(store_url: str) -> AsyncIterator[Backend]:
    b = make_backend(store_url, lease=1.0, cluster=is_cluster(store_url))
    await b.start()
    yield b
    await b.close()


async def wait_tool_start(backend: Backend, run_id: str, name: str) -> None:
    after = 0
    async with asyncio.timeout(20):
        while True:
            for e in await backend.wait_events(run_id, after, timeout=1):
                after = e.seq
                if e.type == "tool_execution_start" and b'"tool_name":"%s"' % name.encode() \
                        in e.data:
                    return


def assert_clean_log(log: list[dict[str, object]]) -> None:
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    types = [e["type"] for e in log]
    assert types.count("agent_start") == 1 and types.count("agent_end") == 1
    assert types[-1] == "agent_end"


async def test_sigkill_mid_run_resumes_on_another_worker(rbackend: Backend, store_url: str,
                                                         tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    a = spawn_worker(store_url, "A", marks, nap=5)
    b = None
    try:
        await wait_consumer(store_url, "A")
        rec, _ = await rbackend.create_run(new_record())
        await wait_tool_start(rbackend, rec.id, "nap")
        b = spawn_worker(store_url, "B", marks, nap=0.2)
        await wait_consumer(store_url, "B")
        loop = asyncio.get_running_loop()
        a.send_signal(signal.SIGKILL)
        t_kill = loop.time()
        await wait_event(rbackend, rec.id, "run_resumed", timeout=10)
        took = loop.time() - t_kill
        print(f"claim after kill: {took:.2f}s (lease 1.0s)")
        end = await wait_end(rbackend, rec.id, timeout=15)
    finally:
        stop_all(a, *([b] if b else []))
    assert (end.status, end.result, end.attempt) == ("completed", "done", 2)
    assert took < 3.0
    log = await events(rbackend, rec.id)
    assert_clean_log(log)
    resumed = [e for e in log if e["type"] == "run_resumed"]
    assert len(resumed) == 1 and resumed[0]["worker"] == "B" and resumed[0]["attempt"] == 2
    assert marks.read_text().splitlines() == ["mark:1"]  # checkpointed: not run again
    ckpt = await rbackend.load_checkpoint(rec.id)
    assert [m["role"] for m in ckpt] == ["user", "assistant", "tool_result", "assistant",
                                         "tool_result", "assistant"]


async def test_sigstop_past_the_lease_is_fenced_out(rbackend: Backend, store_url: str,
                                                     tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    a = spawn_worker(store_url, "A", marks, nap=1.5)
    b = None
    try:
        await wait_consumer(store_url, "A")
        rec, _ = await rbackend.create_run(new_record())
        await wait_tool_start(rbackend, rec.id, "nap")
        b = spawn_worker(store_url, "B", marks, nap=1.5)
        await wait_consumer(store_url, "B")
        a.send_signal(signal.SIGSTOP)
        await wait_event(rbackend, rec.id, "run_resumed", timeout=10)
        await asyncio.sleep(1.6)  # A's nap is long over
        a.send_signal(signal.SIGCONT)  # A wakes inside B's run: its writes must be refused
        end = await wait_end(rbackend, rec.id, timeout=15)
        await asyncio.sleep(0.5)
        assert a.poll() is None  # A stopped that run quietly and lives on
        a.send_signal(signal.SIGTERM)
        assert a.wait(10) == 0
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
        stop_all(a, *([b] if b else []))
    assert (end.status, end.result) == ("completed", "done")
    log = await events(rbackend, rec.id)
    assert_clean_log(log)
    nap_ends = [e for e in log if e["type"] == "tool_execution_end" and
                e["tool_call_id"] == "call_nap"]
    assert len(nap_ends) == 1  # B's; A's was fenced out
