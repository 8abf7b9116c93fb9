"""Issue 9 item 2: a run whose tool kills its worker process (``os._exit``) is not retried
forever. Real worker processes on real Redis: after ``AGENTLOOP_MAX_ATTEMPTS`` consecutive
deaths without progress the run ends ``failed`` with an ``agent_end`` saying why, and a run that
shared those workers completes, harmed by nothing but its own hand-backs."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.attempts import judge
from app.backends import Backend, RunRecord, make_backend
from providers.fake import FakeProvider
from tests.engine import scripted
from tests.engine.harness import events, new_record, wait_end, wait_event, worker
from tests.engine.processes import spawn_worker, stop_all, wait_consumer

pytestmark = pytest.mark.timeout(240)
WORKERS = 4
"""With MAX_ATTEMPTS=2 at most three die: the first attempt (its checkpoint grew: progress),
then two without progress; the next claim ends the run."""


@pytest.fixture
async def rbackend(redis_url: str) -> AsyncIterator[Backend]:
    b = make_backend(redis_url, lease=1.0)
    await b.start()
    yield b
    await b.close()


def spawn(redis_url: str, tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    return spawn_worker(redis_url, name, tmp_path / "marks", nap=1.0,
                        log=tmp_path / f"{name}.log",
                        extra_env={"AGENTLOOP_PROVIDER_FACTORY":
                                   "tests.engine.scripted:deadly_factory",
                                   "AGENTLOOP_MAX_ATTEMPTS": "2"})


async def test_a_run_that_keeps_killing_its_workers_ends_failed(
        rbackend: Backend, redis_url: str, tmp_path: Path) -> None:
    names = [f"W{n}" for n in range(WORKERS)]
    procs = [spawn(redis_url, tmp_path, name) for name in names]
    try:
        for name in names:
            await wait_consumer(redis_url, name, timeout_s=90)
        deadly, _ = await rbackend.create_run(new_record(input="please die", tools=["die"]))
        innocent, _ = await rbackend.create_run(new_record())
        end = await wait_end(rbackend, deadly.id, timeout=150)
        other = await wait_end(rbackend, innocent.id, timeout=60)
    finally:
        codes = [p.poll() for p in procs]
        stop_all(*procs)
    # os._exit(17) killed two workers in a row without progress, after a first death that may
    # count as progress (its checkpoint write may land before the process dies, or not)
    assert codes.count(17) in (WORKERS - 2, WORKERS - 1) and None in codes
    assert (end.status, end.stop_reason) == ("failed", "error")
    assert end.error is not None and "died 2 times in a row without progress" in end.error
    log = await events(rbackend, deadly.id)
    assert log[-1]["type"] == "agent_end" and log[-1]["error"] == end.error
    assert [e["type"] for e in log].count("agent_end") == 1
    assert (other.status, other.result) == ("completed", "done")


def record(mark: int, lost: int) -> RunRecord:
    return RunRecord(id="r", tenant="t", progress_mark=mark, lost_attempts=lost)


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
