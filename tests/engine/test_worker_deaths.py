"""Issue 9 item 2: a run whose tool kills its worker process (``os._exit``) is not retried
forever. Real worker processes on real Redis: after ``AGENTLOOP_MAX_ATTEMPTS`` consecutive
deaths without progress the run ends ``failed`` with an ``agent_end`` saying why, and a run that
shared those workers completes, harmed by nothing but its own hand-backs."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from app.engine.events import json_bytes
from app.store import Backend, RunRecord
from app.worker.attempts import judge, settled
from providers.fake import FakeProvider
from providers.messages import (
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.engine import scripted
from tests.engine.harness import events, new_record, wait_end, wait_event, worker
from tests.engine.processes import spawn_worker, stop_all, wait_consumer
from tests.support.stores import started_backend

pytestmark = pytest.mark.timeout(300)
MAX_ATTEMPTS = 2
LIVE = 2
"""Workers alive at once; each one that dies is replaced (up to ``SPAWN_CAP``)."""
SPAWN_CAP = 2 * MAX_ATTEMPTS + LIVE + 2
"""More workers than the cap can ever need: the deadly run settles nothing (no tool result, no
answer), so its deaths are ``MAX_ATTEMPTS`` (where its input and pick land in the checkpoint
does not matter), plus one per lapsed lease (an attempt fenced out can still run the tool), and
room for the innocent run's worker."""


@pytest.fixture
async def rbackend(redis_url: str) -> AsyncIterator[Backend]:
    async with started_backend(redis_url, lease=1.0) as b:
        yield b


def spawn(redis_url: str, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    return spawn_worker(redis_url, name, tmp_path / "marks", nap=1.0,
                        log=tmp_path / f"{name}.log",
                        extra_env={"AGENTLOOP_PROVIDER_FACTORY":
                                   "tests.engine.scripted:deadly_factory",
                                   "AGENTLOOP_MAX_ATTEMPTS": str(MAX_ATTEMPTS)})


async def test_a_run_that_keeps_killing_its_workers_ends_failed(
        rbackend: Backend, redis_url: str, tmp_path: Path) -> None:
    """Workers are replaced as they die (as a supervisor would), so the test does not depend
    on how many deaths a busy machine adds: under load a live worker's lease can lapse, and the
    attempt fenced out can still run the deadly tool, a death no claim judges. The checkpoint
    is written behind the loop, so where the deadly run's input and pick land varies from run
    to run; neither counts as progress (it once reset the count twice: 5 deaths for a cap of
    2)."""
    procs: list[subprocess.Popen[bytes]] = []

    async def replace_the_dead() -> None:
        while True:
            alive = [p for p in procs if p.poll() is None]
            if len(alive) < LIVE and len(procs) < SPAWN_CAP:
                name = f"W{len(procs)}"
                procs.append(spawn(redis_url, tmp_path, name))
                await wait_consumer(redis_url, name, timeout_s=90)
                continue
            await asyncio.sleep(0.05)

    supervisor = asyncio.create_task(replace_the_dead())
    try:
        while len(procs) < LIVE:
            await asyncio.sleep(0.05)
        deadly, _ = await rbackend.create_run(new_record(input="please die", tools=["die"]))
        innocent, _ = await rbackend.create_run(new_record())
        end = await wait_end(rbackend, deadly.id, timeout=200)
        other = await wait_end(rbackend, innocent.id, timeout=60)
    finally:
        supervisor.cancel()
        codes = [p.poll() for p in procs]
        stop_all(*procs)
    with contextlib.suppress(asyncio.CancelledError):
        await supervisor  # a worker that never came up fails the test here
    deaths = codes.count(17)
    assert MAX_ATTEMPTS <= deaths <= 2 * MAX_ATTEMPTS, codes  # above MAX_ATTEMPTS: lapsed leases
    assert None in codes  # a worker outlived it all
    assert (end.status, end.stop_reason) == ("failed", "error")
    assert end.error is not None
    assert f"died {MAX_ATTEMPTS} times in a row without progress" in end.error
    log = await events(rbackend, deadly.id)
    assert log[-1]["type"] == "agent_end" and log[-1]["error"] == end.error
    assert [e["type"] for e in log].count("agent_end") == 1
    assert (other.status, other.result) == ("completed", "done")


def record(mark: int, lost: int) -> RunRecord:
    return RunRecord(id="r", tenant="t", progress_mark=mark, lost_attempts=lost)


def test_progress_is_a_tool_result_or_an_answer() -> None:
    """The user's input, a steer and a pick land in the checkpoint behind the loop: a deadly
    tool can kill workers in between, and none of them is progress."""
    def stored(message: object) -> dict[str, object]:  # as the sink checkpoints it
        loaded: dict[str, object] = orjson.loads(json_bytes(message))
        return loaded

    user = stored(UserMessage(content="please die"))
    pick = stored(AssistantMessage(content=[TextContent(text="ok"),
                                            ToolCall(id="c", name="die", arguments={})],
                                   stop_reason="tool_use"))
    result = stored(ToolResultMessage(tool_call_id="c", tool_name="die", is_error=True))
    answer = stored(AssistantMessage(content=[TextContent(text="survived")]))
    assert settled([]) == settled([user]) == settled([user, pick]) == 0
    assert settled([user, pick, result]) == 1
    assert settled([user, pick, result, user, answer]) == 2
    mark = settled([user])  # live with the input checkpointed, died after the pick landed
    assert judge(record(mark, 1), settled([user, pick]), 2).error is not None


def test_the_verdict_counts_deaths_without_progress_only() -> None:
    assert judge(record(0, 0), 2, 3).lost == 0  # died, but its checkpoint grew
    assert judge(record(2, 0), 2, 3).lost == 1  # died where it started
    assert judge(record(2, 2), 2, 3).error is not None  # the third in a row: stop
    assert judge(record(-1, 2), 2, 3).lost == 2  # handed back (or never live): not a death
    assert judge(record(2, 5), 2, 0).error is None  # 0: no cap
    verdict = judge(record(4, 2), 2, 3)
    assert verdict.error is not None and "AGENTLOOP_MAX_ATTEMPTS is 3" in verdict.error


async def test_hand_backs_are_not_deaths(backend: Backend) -> None:
    """Workers stopping gracefully, again and again, with a cap of one death: the run goes on
    (``progress_mark`` -1 on every hand-back) and completes."""
    resolve = scripted.resolver(lambda: FakeProvider(script=[scripted.mark_nap_done(0.5)],
                                                     repeat=True))
    rec, _ = await backend.create_run(new_record())
    for _ in range(3):
        async with worker(backend, resolve, lease=30.0, max_attempts=1):
            await wait_event(backend, rec.id, "tool_execution_start", timeout=60)
        mid = await backend.get_run(rec.id)
        assert mid is not None and mid.progress_mark == -1 and mid.lost_attempts == 0
    async with worker(backend, resolve, lease=30.0, max_attempts=1):
        end = await wait_end(backend, rec.id, timeout=60)
    assert (end.status, end.result, end.lost_attempts) == ("completed", "done", 0)


async def test_a_suspect_takes_its_first_step_alone_among_resumed_runs() -> None:
    """The gate of ``app.worker.attempts``: a suspect waits for resumed runs already live to finish
    their first step; resumed runs claimed while it waits or steps wait for it; a suspect
    cancelled while waiting leaves the gate open."""
    from app.worker.attempts import ResumeGate

    gate = ResumeGate()
    await gate.enter(suspect=False)  # a deadly run resumed first: live at once
    suspect = asyncio.create_task(gate.enter(suspect=True))
    await asyncio.sleep(0)
    assert not suspect.done()  # the innocent suspect waits for that first step
    other = asyncio.create_task(gate.enter(suspect=False))
    await asyncio.sleep(0)
    assert not other.done()  # and resumed runs claimed now wait for the suspect
    gate.leave(suspect=False)
    await asyncio.wait_for(suspect, 5)
    assert not other.done()
    gate.leave(suspect=True)
    await asyncio.wait_for(other, 5)
    gate.leave(suspect=False)

    await gate.enter(suspect=False)
    waiting = asyncio.create_task(gate.enter(suspect=True))
    await asyncio.sleep(0)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await asyncio.wait_for(gate.enter(suspect=False), 5)  # not held by the cancelled suspect
