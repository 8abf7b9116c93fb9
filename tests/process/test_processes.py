"""``agentloop serve --processes N`` (issue 33): N API processes on one port under a supervisor.

The real command in a subprocess on a real Redis; every wait is a poll on something the
processes do (a log line, /proc, an event in the store) with a generous ceiling, so the tests
hold on a loaded two-core machine."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from app.store import make_backend
from app.store.redis.keys import JOBS_GROUP, JOBS_STREAM
from tests.engine.harness import wait_end
from tests.engine.processes import ROOT
from tests.engine.test_crash import wait_tool_start
from tests.process.supervised import (
    ServeLog,
    alive,
    children_of,
    fresh_connections,
    metric,
    metrics_dirs,
    until,
)
from tests.support.live_server import free_port
from tests.support.serve_process import start_serve
from tests.support.sse_client import Frame, open_stream

pytestmark = pytest.mark.timeout(300)
START = 120.0
"""Ceiling for the children to start (imports, the sandbox probe) on a loaded machine."""
STOP = 90.0
"""Ceiling for a SIGTERM'd supervisor to exit (it kills a child after 30 + lease + 10 s)."""
RUNS = 24


async def _serve(port: int, tmp_path: Path, log: Path, *args: str,
                 **settings: str) -> asyncio.subprocess.Process:
    with log.open("ab") as sink:  # the children inherit it; appends do not interleave
        return await start_serve(port, tmp_path, stderr=sink.fileno(), args=args,
                                 AGENTLOOP_WORKSPACE_ROOT=str(tmp_path / "ws"),
                                 TMPDIR=str(tmp_path), **settings)


async def _both_serving(proc: asyncio.subprocess.Process, log: ServeLog) -> set[int]:
    """Until the supervisor has two children serving: their pids (its children in /proc)."""
    def two() -> set[int] | None:
        assert proc.returncode is None, log.text()[-3000:]
        kids = children_of(proc.pid)
        return kids if len(kids) == 2 and kids <= set(log.serving()) else None

    return await until(two, START, "two processes serving")


async def _stop(proc: asyncio.subprocess.Process, kids: set[int], log: ServeLog) -> None:
    """SIGTERM: every child drains and exits by itself (none killed), then the command exits
    0 within a bound, leaving no child behind."""
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(STOP):
        code = await proc.wait()
    assert code == 0
    assert not [pid for pid in kids if alive(pid)]
    assert "did not stop within" not in log.text()
    assert "every process has exited" in log.text()


def _kill(proc: asyncio.subprocess.Process) -> None:
    """Teardown after a failure: the supervisor and every child."""
    for pid in children_of(proc.pid):
        os.kill(pid, signal.SIGKILL)
    if proc.returncode is None:
        proc.kill()


async def _run_to_its_end(port: int, i: int) -> list[Frame]:
    """POST /runs on one new connection, then its whole event stream on another."""
    async with fresh_connections(port) as client:
        created = await client.post("/runs", json={"input": f"hello {i}"})
        assert created.status_code == 201, created.text
        async with open_stream(client, created.json()["events_url"]) as stream:
            return [frame async for frame in stream]


async def test_two_processes_share_the_port_the_runs_and_the_metrics_and_stop_on_sigterm(
        redis_url: str, tmp_path: Path) -> None:
    port, log = free_port(), ServeLog(tmp_path / "serve.log")
    proc = await _serve(port, tmp_path, log.path, "--processes", "2",
                        AGENTLOOP_REDIS_URL=redis_url, AGENTLOOP_DEFAULT_MODEL="demo:echo")
    try:
        kids = await _both_serving(proc, log)
        assert metrics_dirs(tmp_path)  # the shared metrics directory
        gate = asyncio.Semaphore(6)

        async def one(i: int) -> list[Frame]:
            async with gate:
                return await _run_to_its_end(port, i)

        streams = await asyncio.gather(*(one(i) for i in range(RUNS)))
        for frames in streams:  # every event, in order, to the run's end
            assert [f.id for f in frames] == list(range(1, len(frames) + 1)), frames
            assert frames[-1].event == "agent_end", frames[-1]
        # the kernel spread the new connections over both processes
        posted = await asyncio.to_thread(log.answered, "POST /runs")
        assert set(posted) == kids and sum(posted.values()) == RUNS, posted

        # whichever process answers /metrics counts the runs of both
        ended = 'agentloop_runs_ended_total{status="completed",stop_reason="stop"}'
        async with fresh_connections(port) as client:
            async def scrapes_count_every_run() -> bool:
                text = (await client.get("/metrics")).text
                assert metric(text, "agentloop_runs_accepted_total") == RUNS, text
                return metric(text, ended) == RUNS  # a run's end is counted just after it

            async with asyncio.timeout(60):
                while not await scrapes_count_every_run():
                    await asyncio.sleep(0.2)
            for _ in range(200):
                assert await scrapes_count_every_run()
                if len(await asyncio.to_thread(log.answered, "GET /metrics")) == 2:
                    break
            assert set(await asyncio.to_thread(log.answered, "GET /metrics")) == kids

        health = await asyncio.create_subprocess_exec(  # the image's HEALTHCHECK
            sys.executable, "-m", "app.process.cli", "health", "--port", str(port),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        assert await health.wait() == 0

        await _stop(proc, kids, log)
        assert not metrics_dirs(tmp_path)  # removed on exit
    finally:
        _kill(proc)


async def _driver(redis_url: str) -> int:
    """The pid of the worker holding the one pending job (named ``procs-<pid>``)."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        summary = await client.xpending(JOBS_STREAM, JOBS_GROUP)
    finally:
        await client.aclose()
    [holder] = [c["name"].decode() for c in summary["consumers"] if c["pending"]]
    return int(holder.removeprefix("procs-"))


async def test_a_killed_process_is_restarted_and_its_run_resumes_and_completes(
        redis_url: str, tmp_path: Path) -> None:
    """SIGKILL of the child driving a run (mark, then nap held by a gate): the other child
    answers every new connection meanwhile, the killed one is replaced, and a worker resumes
    the run from its checkpoint (mark is not run again) to its end."""
    port, log = free_port(), ServeLog(tmp_path / "serve.log")
    gate, marks = tmp_path / "gate", tmp_path / "marks"
    proc = await _serve(port, tmp_path, log.path, "--processes", "2",
                        AGENTLOOP_REDIS_URL=redis_url, AGENTLOOP_LEASE_SECONDS="3",
                        AGENTLOOP_WORKER_NAME="procs",
                        AGENTLOOP_PROVIDER_FACTORY="tests.engine.scripted:crash_factory",
                        AGENTLOOP_TEST_GATE=str(gate), AGENTLOOP_TEST_MARKS=str(marks),
                        PYTHONPATH=str(ROOT))
    backend = make_backend(redis_url, lease=3.0)
    await backend.start()
    try:
        kids = await _both_serving(proc, log)
        async with fresh_connections(port) as client:
            created = await client.post("/runs", json={"model": "fake:m", "input": "hi",
                                                       "tools": ["mark", "nap"]})
            assert created.status_code == 201, created.text
            run = created.json()
            await wait_tool_start(backend, run["id"], "nap")
            driver = await _driver(redis_url)
            assert driver in kids
            os.kill(driver, signal.SIGKILL)
            await until(lambda: f"process {driver} exited (killed by SIGKILL)" in log.text(),
                        60, "the supervisor saw the kill")
            [shared] = metrics_dirs(tmp_path)  # the killed one's files folded, none left
            assert not list(shared.glob(f"*_{driver}.db"))
            assert list(shared.glob("counter_exited.db"))
            for _ in range(10):  # the survivor answers while the slot restarts
                assert (await client.get("/healthz")).status_code == 200
            gate.touch()
            end = await wait_end(backend, run["id"], timeout=120)
            assert end.status == "completed"
            async with open_stream(client, run["events_url"]) as stream:
                events = [frame.event async for frame in stream]
            assert "run_resumed" in events and events[-1] == "agent_end", events
            assert marks.read_text().splitlines() == ["mark:1"]  # checkpointed: not again

            def replaced() -> set[int] | None:
                now = children_of(proc.pid)
                return now if len(now) == 2 and driver not in now and \
                    now <= set(log.serving()) else None

            first, kids = kids, await until(replaced, START, "the killed process replaced")
            (new,) = kids - first
            for _ in range(200):  # new connections reach the new process too
                assert (await client.get("/healthz")).status_code == 200
                if new in await asyncio.to_thread(log.answered, "GET /healthz"):
                    break
            assert new in await asyncio.to_thread(log.answered, "GET /healthz")
        await _stop(proc, kids, log)
    finally:
        await backend.close()
        _kill(proc)


async def test_processes_that_keep_failing_at_start_stop_the_service_with_the_reason(
        redis_url: str, tmp_path: Path) -> None:
    """A provider factory that cannot be imported fails every child's start: the supervisor
    gives up (exit 1, the reason on its last line) instead of restarting them for ever."""
    port, log = free_port(), ServeLog(tmp_path / "serve.log")
    proc = await _serve(port, tmp_path, log.path, "--processes", "2",
                        AGENTLOOP_REDIS_URL=redis_url,
                        AGENTLOOP_PROVIDER_FACTORY="tests_no_such_module:factory")
    started: set[int] = set()
    try:
        async with asyncio.timeout(START * 2):
            while proc.returncode is None:
                started |= children_of(proc.pid)
                await asyncio.sleep(0.05)
    finally:
        _kill(proc)
    assert proc.returncode == 1
    last = log.text().strip().splitlines()[-1]
    assert "processes in a row exited before serving" in last, last
    assert "No module named 'tests_no_such_module'" in last, last
    assert not [pid for pid in started if alive(pid)]
    assert not metrics_dirs(tmp_path)
