"""Run a worker in-process and wait for runs to end."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from app.store import Backend, RunRecord, StoredEvent
from app.store.records import TERMINAL
from app.worker.worker import Worker
from providers.base import Provider
from tests.engine import scripted

_n = 0


def new_record(**request: Any) -> RunRecord:
    global _n
    _n += 1
    req = {"model": "fake:m", "input": "hi", "tools": ["mark", "nap"], **request}
    return RunRecord(id=f"run_{_n}_{time.time_ns()}", tenant="t", model=req["model"],
                     created_at=time.time(), request=req)


@contextlib.asynccontextmanager
async def worker(backend: Backend, resolve: Callable[[str], tuple[Provider, str]],
                 **options: Any) -> AsyncIterator[Worker]:
    stop = asyncio.Event()
    options.setdefault("lease", 2.0)
    options.setdefault("registry", scripted.registry())
    w = Worker(backend, resolve, **options)
    task = asyncio.create_task(w.run(stop))
    try:
        yield w
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)  # hand-backs under load take a while


async def wait_end(backend: Backend, run_id: str, timeout: float = 10) -> RunRecord:  # noqa: ASYNC109
    """Until the run ends. Cancel-safe: a cancel (the test's teardown) ends it at once."""
    async with asyncio.timeout(timeout):
        while True:
            rec = await backend.get_run(run_id)
            if rec is not None and rec.status in TERMINAL:
                return rec
            await asyncio.sleep(0.02)


async def wait_ends(backend: Backend, run_ids: list[str], timeout: float) -> list[RunRecord]:  # noqa: ASYNC109
    """``wait_end`` for many runs in one task group: when one fails, the others are cancelled
    and awaited before the error propagates (``gather`` left them polling a closed backend
    through the event loop's teardown, where pytest-timeout could not stop them)."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(wait_end(backend, i, timeout)) for i in run_ids]
    return [t.result() for t in tasks]


async def wait_event(backend: Backend, run_id: str, type_: str, timeout: float = 10  # noqa: ASYNC109
                     ) -> StoredEvent:
    after = 0
    async with asyncio.timeout(timeout):
        while True:
            for e in await backend.wait_events(run_id, after, timeout=1):
                after = e.seq
                if e.type == type_:
                    return e


async def events(backend: Backend, run_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(e.data) for e in await backend.read_events(run_id, 0, limit=100000)]
