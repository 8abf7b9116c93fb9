"""A worker killed while a thread's run is active (real worker processes, Redis): the run
resumes on another worker, the thread stays busy until that run ends, and the thread's
history is complete, in order, without duplicates, including a message posted while no
worker held the run."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from app.engine.events import RunCreated, json_bytes
from app.store import Backend
from app.store.ids import new_thread_id, new_thread_run_id
from app.store.records import RunRecord
from app.store.thread_records import ThreadPost, ThreadRecord
from providers.messages import UserMessage
from tests.engine.harness import events, wait_end, wait_event
from tests.engine.processes import spawn_worker, stop_all, wait_consumer
from tests.support.stores import started_backend

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def rbackend(redis_url: str) -> AsyncIterator[Backend]:
    async with started_backend(redis_url, lease=1.0) as b:
        yield b


def post(thread_id: str, text: str) -> ThreadPost:
    request = {"model": "fake:m", "input": text, "tools": ["mark", "nap"]}
    record = RunRecord(id=new_thread_run_id(thread_id), tenant="t", model="fake:m",
                       created_at=time.time(), request=request)
    return ThreadPost(tenant="t", multitask="enqueue", candidate=record,
                      first_event=RunCreated(model="fake:m"),
                      prompts=[json_bytes(UserMessage(content=text))],
                      message_ids=[f"msg_{text}"], request_hash=text)


async def wait_tool_start(backend: Backend, run_id: str, name: str) -> None:
    after = 0
    async with asyncio.timeout(60):
        while True:
            for e in await backend.wait_events(run_id, after, timeout=1):
                after = e.seq
                if e.type == "tool_execution_start" and f'"tool_name":"{name}"'.encode() \
                        in e.data:
                    return


async def wait_idle(backend: Backend, thread_id: str) -> ThreadRecord:
    async with asyncio.timeout(60):
        while True:
            thread = await backend.get_thread(thread_id)
            assert thread is not None
            if thread.active_run is None:
                return thread
            await asyncio.sleep(0.05)


async def test_a_thread_run_survives_its_worker(rbackend: Backend, redis_url: str,
                                                tmp_path: Path) -> None:
    store = rbackend
    thread_id = new_thread_id()
    await store.create_thread(ThreadRecord(id=thread_id, tenant="t", created_at=time.time()))
    # both workers up before the run exists (start-up takes seconds under load); whichever
    # takes the run is killed in its nap, the other resumes it (and naps again: the call
    # was never answered)
    workers = {name: spawn_worker(redis_url, name, tmp_path / "marks", nap=4)
               for name in ("A", "B")}
    try:
        for name in workers:
            await wait_consumer(redis_url, name, timeout_s=60)
        started = await store.post_thread_run(thread_id, post(thread_id, "first"))
        run_id = started.run_id
        await wait_tool_start(rbackend, run_id, "nap")
        holder = await rbackend.get_run(run_id)
        assert holder is not None and holder.worker in workers
        workers[holder.worker].send_signal(signal.SIGKILL)
        queued = await store.post_thread_run(thread_id, post(thread_id, "second"))
        assert (queued.action, queued.run_id) == ("queued", run_id)
        thread = await store.get_thread(thread_id)
        assert thread is not None and thread.status == "busy" and thread.active_run == run_id
        resumed = await wait_event(rbackend, run_id, "run_resumed", timeout=60)
        end = await wait_end(rbackend, run_id, timeout=60)
        thread = await wait_idle(rbackend, thread_id)
    finally:
        stop_all(*workers.values())
    assert orjson.loads(resumed.data)["worker"] != holder.worker  # the other worker
    assert end.status == "completed" and end.attempt >= 2
    assert thread.runs == [run_id]
    history = await store.thread_messages(thread_id)
    roles = [m["role"] for m in history]
    assert roles == ["user", "assistant", "tool_result", "assistant", "tool_result",
                     "assistant", "user", "assistant"]
    users = [m["content"] for m in history if m["role"] == "user"]
    assert users == ["first", "second"]
    assert history == await rbackend.load_checkpoint(run_id)
    log = await events(rbackend, run_id)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert [e["type"] for e in log].count("agent_end") == 1
