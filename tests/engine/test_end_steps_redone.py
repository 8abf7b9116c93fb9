"""A worker lost between a run's end and its job's ack: the next worker takes the steps after
the end again (``app.worker.run_end``: its quota slot, its usage, its webhook; each
idempotent). Before, Redis's claim dropped the job of an ended run, so a run whose worker
died there was never counted in ``GET /usage`` (and its webhook never queued)."""

from __future__ import annotations

import asyncio
import time

from app.store import Backend
from app.store.quota_records import utc_day
from providers import fake
from providers.fake import FakeProvider
from tests.engine import resumable, scripted
from tests.engine.harness import new_record, wait_end, worker


async def runs_counted(backend: Backend, tenant: str) -> int:
    lines = await backend.usage(tenant, [utc_day(time.time())])
    return sum(line.runs for line in lines if line.dimension == "tenant")


async def test_the_next_worker_counts_a_run_whose_worker_was_lost_after_its_end(
        backend: Backend) -> None:
    resolve = scripted.resolver(lambda: FakeProvider(script=[fake.text("done")], repeat=True))
    rec, _ = await backend.create_run(new_record(tools=[]))
    lost = resumable.StuckAt(backend, "accrue_usage")  # after the end, before the ack
    async with worker(lost, resolve, lease=1.0):
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
