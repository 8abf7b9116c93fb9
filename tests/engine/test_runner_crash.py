"""A bug in the runner (an exception nothing expected) ends the run ``failed`` with an
``agent_end`` saying so, its open starts closed first, and stops its loop: the worker's
heartbeat keeps the claim alive, so without this the run stayed ``running`` and every stream
of it waited forever. The worker's other runs are not touched."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

import app.worker.runner as runner
from app.engine import LoopOutcome
from app.store import Backend
from app.worker.sink import EventSink
from providers.fake import FakeProvider
from tests.engine import scripted
from tests.engine.harness import events, new_record, wait_end, wait_event, worker

pytestmark = pytest.mark.timeout(120)


async def test_a_crashed_runner_ends_its_run_failed(backend: Backend,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    resolve = scripted.resolver(lambda: FakeProvider(script=[scripted.mark_nap_done(1.0)],
                                                     repeat=True))
    victim, _ = await backend.create_run(new_record())
    loop_tasks: list[asyncio.Task[LoopOutcome]] = []
    original = runner._until_loop_ends

    async def crash_midway(loop_task: asyncio.Task[LoopOutcome],
                           sink: EventSink) -> LoopOutcome:
        if sink.run_id != victim.id:
            return await original(loop_task, sink)
        loop_tasks.append(loop_task)
        await wait_event(backend, victim.id, "tool_execution_start", timeout=60)
        raise RuntimeError("a bug")

    monkeypatch.setattr(runner, "_until_loop_ends", crash_midway)
    async with worker(backend, resolve, lease=30.0):
        end = await wait_end(backend, victim.id, timeout=60)
        other, _ = await backend.create_run(new_record())
        after = await wait_end(backend, other.id, timeout=60)
    assert (end.status, end.stop_reason) == ("failed", "error")
    assert end.error is not None and "(RuntimeError)" in end.error
    log = await events(backend, victim.id)
    assert log[-1]["type"] == "agent_end" and log[-1]["error"] == end.error
    kinds = Counter(e["type"] for e in log)
    for span in ("message", "tool_execution"):
        assert kinds[f"{span}_start"] == kinds[f"{span}_end"] >= 1, kinds
    assert loop_tasks and loop_tasks[0].done()  # its loop was stopped, not left running
    assert (after.status, after.result) == ("completed", "done")
