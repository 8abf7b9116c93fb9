"""Graceful shutdown: a stopping worker hands its running runs back (checkpoint flushed, taken
queue messages released) and another worker resumes them at once, without waiting for the
lease."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from app.engine.queues import QueuedMessage
from app.store import Backend
from app.store.errors import BackendError
from app.store.records import Claim
from app.worker.worker import Worker
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


class _SwallowingHeartbeat:
    """A store whose heartbeat call swallows a cancel (as a Redis client does when its socket
    timeout fires with it): it returns as if it had worked (the client retried), or raises
    the store's error; everything else is the real backend's."""

    def __init__(self, inner: Backend, *, raises: bool) -> None:
        self.inner, self.raises = inner, raises
        self.beating = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def heartbeat(self, worker: str) -> None:
        self.beating.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            if self.raises:
                raise BackendError("heartbeat interrupted") from None


@pytest.mark.parametrize("raises", [False, True], ids=["returns", "raises"])
async def test_a_cancel_swallowed_by_a_store_call_still_stops_the_worker(
        backend: Backend, raises: bool) -> None:
    """Before: the heartbeat loop beat on, and the stopping worker waited for it for ever
    (a hung shutdown, seen as the control table's teardown hanging under load)."""
    store = _SwallowingHeartbeat(backend, raises=raises)
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(store, scripted.resolver([]),  # type: ignore[arg-type]
                                      lease=30.0, heartbeat=0.05).run(stop))
    await asyncio.wait_for(store.beating.wait(), 10)
    stop.set()
    await asyncio.wait_for(task, 10)


class _SwallowingCall:
    """A store whose first ``method`` call swallows a cancel as ``_SwallowingHeartbeat``'s
    heartbeat does, then answers as the real backend (``returns``) or raises the store's
    error (``raises``: the caller retries), or lets it through as it should (``passes``);
    everything else is the real backend's."""

    def __init__(self, inner: Backend, method: str, *, outcome: str) -> None:
        self.inner, self.method, self.outcome = inner, method, outcome
        self.swallowing = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        real = getattr(self.inner, name)
        if name == "claim_many" and self.method == "get_run":
            return self._claims_without_records
        if name != self.method or self.swallowing.is_set():
            return real

        async def swallow(*args: object, **kwargs: object) -> object:
            self.swallowing.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if self.outcome == "passes":
                    raise
                if self.outcome == "raises":
                    raise BackendError(f"{name} interrupted") from None
            return await real(*args, **kwargs)

        return swallow

    async def _claims_without_records(self, *args: Any) -> list[Claim]:
        """Claims as the in-process backend makes them, without the run's record, so the
        runner's first store call is its read of the record (the Redis claim carries it)."""
        claims: list[Claim] = await self.inner.claim_many(*args)
        return [replace(c, record=None) for c in claims]


@pytest.mark.parametrize("outcome", ["returns", "raises", "passes"])
@pytest.mark.parametrize("method", ["get_run", "take"], ids=["at-setup", "in-the-loop"])
async def test_a_run_whose_stop_a_store_call_swallowed_is_still_handed_back(
        backend: Backend, method: str, outcome: str) -> None:
    """The shutdown's cancel lands in the runner's first store call (its record, before the
    loop starts) or in the loop's first queue poll, and the call swallows it. Before: the
    attempt went on and drove the run to its end while the shutdown waited for it (for as
    long as the run lasts). Now it is handed back as any stopped run is, and the next worker
    resumes it to its end. A cancel let through at setup used to leave the run to its lease
    (and its next claimer counted a death): handed back too."""
    scripted.CALLS.clear()
    resolve = scripted.resolver(lambda: FakeProvider(script=[scripted.mark_nap_done(0.3)],
                                                     repeat=True))
    store = _SwallowingCall(backend, method, outcome=outcome)
    rec, _ = await backend.create_run(new_record())
    async with worker(store, resolve, lease=30.0):  # type: ignore[arg-type]
        await asyncio.wait_for(store.swallowing.wait(), 30)
    mid = await backend.get_run(rec.id)
    assert mid is not None and mid.worker is None
    assert mid.status == ("queued" if method == "get_run" else "running")  # never started
    assert mid.progress_mark == -1  # handed back: not counted as a death by its next claimer
    assert "agent_end" not in [e["type"] for e in await events(backend, rec.id)]
    async with worker(backend, resolve, lease=30.0):
        end = await wait_end(backend, rec.id, timeout=30)
    assert (end.status, end.result) == ("completed", "done")
    assert scripted.CALLS.count("mark:1") == 1
