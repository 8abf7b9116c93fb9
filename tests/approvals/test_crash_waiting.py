"""A worker crash or restart while a run waits changes nothing: real worker processes on
Redis; the waiting run is held by none of them, and whichever worker is alive when the answer
arrives continues it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.engine.events import ApprovalDecided
from app.store import Backend
from app.store.records import Answer, RunRecord
from tests.engine.harness import events, new_record, wait_end
from tests.engine.processes import spawn_worker, stop_all, wait_consumer
from tests.support.redis_server import redis_server_url, redis_url
from tests.support.stores import started_backend

__all__ = ["redis_server_url", "redis_url"]
pytestmark = pytest.mark.timeout(120)
STARTUP = 60.0
"""Seconds a worker process may take to start on a loaded machine (~9 s seen)."""


@pytest.fixture
async def rbackend(redis_url: str) -> AsyncIterator[Backend]:
    async with started_backend(redis_url, lease=1.0) as b:
        yield b


async def wait_parked(backend: Backend, run_id: str) -> RunRecord:
    async with asyncio.timeout(30):
        while True:
            record = await backend.get_run(run_id)
            if record is not None and record.status == "requires_action":
                return record
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
async def test_a_worker_crash_or_restart_while_waiting_changes_nothing(
        rbackend: Backend, redis_url: str, tmp_path: Path, how: str) -> None:
    marks = tmp_path / "marks"
    a = spawn_worker(redis_url, "A", marks, nap=0.1)
    b = None
    try:
        await wait_consumer(redis_url, "A", STARTUP)
        rec, _ = await rbackend.create_run(new_record(approval=["mark"]))
        parked = await wait_parked(rbackend, rec.id)
        assert parked.worker is None
        a.send_signal(getattr(signal, how))
        await asyncio.to_thread(a.wait, 30)
        assert not marks.exists()  # nothing ran: the pick waits
        state = await rbackend.parked_state(rec.id)
        assert state is not None and [c["tool_call_id"] for c in state.calls] == ["call_mark"]
        await rbackend.decide(rec.id, [Answer("call_mark", {"kind": "approve"}, ApprovalDecided(
            tool_call_id="call_mark", decision="approve"))])
        b = spawn_worker(redis_url, "B", marks, nap=0.1)
        end = await wait_end(rbackend, rec.id, timeout=STARTUP)
    finally:
        stop_all(a, *([b] if b else []))
    assert (end.status, end.result) == ("completed", "done")
    assert marks.read_text().splitlines() == ["mark:1"]
    log = await events(rbackend, rec.id)
    types = [e["type"] for e in log]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert types.count("agent_start") == 1 and types.count("agent_end") == 1
    assert types.count("approval_requested") == 1 and "run_resumed" not in types
    assert types.index("approval_decided") < types.index("tool_execution_start")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
async def test_a_worker_crash_while_a_nested_pick_waits_changes_nothing(
        rbackend: Backend, redis_url: str, tmp_path: Path, how: str) -> None:
    """The nested loop of ``delegate`` parks the run; the worker dies; the answer arrives;
    another worker runs ``delegate``'s body again and its nested loop goes on from the log:
    no model call is made twice, the approved tool runs once."""
    marks = tmp_path / "marks"
    env = {"AGENTLOOP_PROVIDER_FACTORY": "tests.approvals.nested_scripted:factory"}
    a = spawn_worker(redis_url, "A", marks, nap=0.1, extra_env=env)
    b = None
    try:
        await wait_consumer(redis_url, "A", STARTUP)
        rec, _ = await rbackend.create_run(new_record(approval=["mark"],
                                                      tools=["mark", "delegate"]))
        parked = await wait_parked(rbackend, rec.id)
        assert parked.worker is None
        a.send_signal(getattr(signal, how))
        await asyncio.to_thread(a.wait, 30)
        state = await rbackend.parked_state(rec.id)
        assert state is not None
        assert [(c["tool_call_id"], c["depth"], c["parent_tool_call_id"])
                for c in state.calls] == [("call_inner_mark", 1, "call_delegate")]
        decided = ApprovalDecided(tool_call_id="call_inner_mark", decision="approve", depth=1,
                                  parent_tool_call_id="call_delegate")
        await rbackend.decide(rec.id, [Answer("call_inner_mark", {"kind": "approve"}, decided)])
        b = spawn_worker(redis_url, "B", marks, nap=0.1, extra_env=env)
        end = await wait_end(rbackend, rec.id, timeout=STARTUP)
    finally:
        stop_all(a, *([b] if b else []))
    assert (end.status, end.result) == ("completed", "done")
    assert marks.read_text().splitlines() == [
        "ask:outer:0", "delegate", "ask:inner:0",  # worker A, up to the park
        "delegate", "mark:7", "ask:inner:1", "ask:outer:1"]  # worker B: no call made twice
    log = await events(rbackend, rec.id)
    types = [e["type"] for e in log]
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert types.count("agent_start") == 2 and "run_resumed" not in types
    assert [e.get("depth", 0) for e in log if e["type"] == "agent_end"] == [1, 0]
    starts = [e["tool_call_id"] for e in log if e["type"] == "tool_execution_start"]
    ends = [e["tool_call_id"] for e in log if e["type"] == "tool_execution_end"]
    assert starts == ["call_delegate", "call_inner_mark"]
    assert ends == ["call_inner_mark", "call_delegate"]
    asked = next(e for e in log if e["type"] == "approval_requested")
    assert (asked["depth"], asked["parent_tool_call_id"]) == (1, "call_delegate")
