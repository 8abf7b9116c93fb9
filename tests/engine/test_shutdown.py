"""Graceful shutdown: a stopping worker hands its running runs back (checkpoint flushed, taken
queue messages released) and another worker resumes them at once, without waiting for the
lease."""

from __future__ import annotations

import asyncio

from app.engine.queues import QueuedMessage
from app.store import Backend
from providers.fake import FakeProvider
from providers.messages import UserMessage
from tests.engine import scripted
from tests.engine.harness import events, new_record, wait_end, wait_event, worker


async def test_stop_hands_the_run_to_the_next_worker(backend: Backend) -> None:
    scripted.CALLS.clear()
    resolve = scripted.resolver(lambda: FakeProvider(script=[scripted.mark_nap_done(0.3)],
                                                     repeat=True))
    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve, lease=30.0):
        await wait_event(backend, rec.id, "tool_execution_start")  # mark
        async with asyncio.timeout(5):
            while "nap" not in str(await backend.load_checkpoint(rec.id)):
                await asyncio.sleep(0.01)
        await backend.enqueue(rec.id, "follow_up", QueuedMessage(
            id="f1", message=UserMessage(content="later")))
    mid = await backend.get_run(rec.id)
    assert mid is not None and mid.status == "running" and mid.worker is None
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    async with worker(backend, resolve, lease=30.0):
        await wait_event(backend, rec.id, "run_resumed", timeout=5)
        assert loop.time() - t0 < 2.0  # well inside the 30 s lease
        end = await wait_end(backend, rec.id)
    assert (end.status, end.result) == ("completed", "done")
    assert scripted.CALLS.count("mark:1") == 1
    log = await events(backend, rec.id)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    users = [e["message"]["content"] for e in log
             if e["type"] == "message_end" and e["message"]["role"] == "user"]
    assert users == ["hi", "later"]
