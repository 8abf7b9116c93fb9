"""A worker lost between a run's end and its job's ack: the next worker takes the steps after
the end again (``app.worker.run_end``: its quota slot, its usage, its webhook; each
idempotent). Before, Redis's claim dropped the job of an ended run, so a run whose worker
died there was never counted in ``GET /usage`` (and its webhook never queued)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.store import Backend
from app.store.quota_records import utc_day
from providers import fake
from providers.fake import FakeProvider
from tests.engine import scripted
from tests.engine.harness import new_record, wait_end, worker


class LostBeforeUsage:
    """A store whose ``accrue_usage`` never returns: its worker stops there (``reached``),
    after the run's end is stored and before its job is acknowledged."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.reached = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def accrue_usage(self, *args: Any, **kwargs: Any) -> bool:
        self.reached.set()
        await asyncio.Event().wait()
        return False


async def runs_counted(backend: Backend, tenant: str) -> int:
    lines = await backend.usage(tenant, [utc_day(time.time())])
    return sum(line.runs for line in lines if line.dimension == "tenant")


async def test_the_next_worker_counts_a_run_whose_worker_was_lost_after_its_end(
        backend: Backend) -> None:
    resolve = scripted.resolver(lambda: FakeProvider(script=[fake.text("done")], repeat=True))
    rec, _ = await backend.create_run(new_record(tools=[]))
    lost = LostBeforeUsage(backend)
    async with worker(lost, resolve, lease=1.0):  # type: ignore[arg-type]
        await asyncio.wait_for(lost.reached.wait(), 30)
    ended = await backend.get_run(rec.id)
    assert ended is not None and ended.status == "completed"
    assert await runs_counted(backend, rec.tenant) == 0
    async with worker(backend, resolve, lease=1.0):  # takes the lapsed job
        async with asyncio.timeout(30):
            while await runs_counted(backend, rec.tenant) == 0:
                await asyncio.sleep(0.05)
    assert await runs_counted(backend, rec.tenant) == 1
    end = await wait_end(backend, rec.id)
    assert (end.status, end.result) == ("completed", "done")
    assert await backend.claim("w-later", timeout=0.2) is None  # its job was acknowledged
