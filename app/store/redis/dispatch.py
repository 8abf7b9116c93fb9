"""Dispatch on Redis (a part of ``RedisBackend``): the ``al:jobs`` stream read through the
``workers`` consumer group, a worker's pending entries being its runs, and one liveness key per
worker (``al:worker:<name>``, PX lease) that claiming workers check to take the jobs of lapsed
holders (the timeline is in ``app.store.redis.backend``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from redis.exceptions import ResponseError

from app.store.ids import thread_of_run
from app.store.records import Claim
from app.store.redis import keys
from app.store.redis.core import STRANDED_AFTER_S, RedisCore
from app.store.redis.errors import guard
from app.store.redis.records import decode_record, pairs

_Entry = tuple[bytes, dict[bytes, bytes] | None]
"""A job stream entry: its id and fields (None once deleted)."""
BLOCK_MAX = 1.0
"""Longest XREADGROUP block (s): far below the socket timeout (redis-py defaults hang ~60 s)."""
SWEEP_BATCH = 200
"""Stranded-run marks one ``redispatch_stranded`` call looks at (the next call takes more)."""


class RedisDispatch(RedisCore):
    """See ``app.store.contract.Dispatch`` (and the module docstring)."""

    async def claim(self, worker: str, timeout: float) -> Claim | None:  # noqa: ASYNC109
        """See ``Backend.claim``."""
        claims = await self.claim_many(worker, timeout, 1)
        return claims[0] if claims else None

    @guard
    async def claim_many(self, worker: str, timeout: float,  # noqa: ASYNC109
                         count: int) -> list[Claim]:
        """See ``Backend.claim_many``: lapsed runs first (XAUTOCLAIM, looked for at most once a
        second), then new jobs (XREADGROUP COUNT), assigned in one pipeline."""
        try:
            return await self._claim(worker, timeout, count)
        except ResponseError as exc:
            if "NOGROUP" in str(exc):  # Redis lost its data (restart without persistence)
                self._group_ready = False
            raise

    async def _claim(self, worker: str, timeout: float,  # noqa: ASYNC109
                     count: int) -> list[Claim]:
        await self._ensure_group()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        looked = False
        while True:
            entries: list[tuple[bytes, dict[bytes, bytes] | None]] = []
            if loop.time() >= self._next_scan:
                entries = await self._lapsed(worker, count)
                if not entries:
                    self._next_scan = loop.time() + min(0.5, self.lease / 4)
            if not entries:
                # wake for the next scan too: a lapsed worker is noticed within one interval
                block = min(BLOCK_MAX, deadline - loop.time(),
                            max(self._next_scan - loop.time(), 0.05))
                if block <= 0 and looked:
                    return []
                # a claim slowed past its timeout before its first look still takes what is
                # waiting (a look without blocking), as the memory backend does
                rows: Any = await self.client.xreadgroup(
                    keys.JOBS_GROUP, worker, {keys.JOBS_STREAM: ">"}, count=count,
                    block=max(1, int(block * 1000)) if block > 0 else None)
                looked = True
                entries = [entry for _, found in rows or [] for entry in found]
            claims = await self._assign_all(worker, entries)
            if claims:
                if loop.time() - self._alive_at.get(worker, -self.lease) >= self.lease / 4:
                    await self._alive(worker)  # a claim is a heartbeat (unless one was recent)
                return claims

    async def _lapsed(self, worker: str, count: int) -> list[_Entry]:
        """Jobs of workers whose liveness key has lapsed, now claimed for ``worker``."""
        summary: Any = await self.client.xpending(keys.JOBS_STREAM, keys.JOBS_GROUP)
        me = worker.encode()
        holders = [c["name"] for c in summary.get("consumers") or [] if c["name"] != me]
        if not holders:
            return []
        alive: Any = await self.client.mget([keys.worker_key(h.decode()) for h in holders])
        entries: list[_Entry] = []
        for holder, live in zip(holders, alive, strict=True):
            if not live and len(entries) < count:
                entries += await self._jobs_of(holder, worker, count - len(entries))
        return entries

    async def _jobs_of(self, holder: bytes, worker: str, count: int) -> list[_Entry]:
        rows: Any = await self.client.xpending_range(keys.JOBS_STREAM, keys.JOBS_GROUP, "-", "+",
                                                     count, consumername=holder)
        if not rows:
            return []
        claimed: Any = await self.client.xclaim(
            keys.JOBS_STREAM, keys.JOBS_GROUP, worker, int(self.lease * 500),
            [r["message_id"] for r in rows])
        return list(claimed)

    async def _alive(self, worker: str) -> None:
        set_at = asyncio.get_running_loop().time()
        await self.client.set(keys.worker_key(worker), b"1", px=max(1, int(self.lease * 1000)))
        self._alive_at[worker] = set_at

    async def _assign_all(self, worker: str, entries: list[tuple[bytes, dict[bytes, bytes] | None]]
                          ) -> list[Claim]:
        found = await asyncio.gather(*(self._assign(worker, entry_id, fields)
                                       for entry_id, fields in entries))
        return [claim for claim in found if claim is not None]

    async def _assign(self, worker: str, entry_id: bytes, fields: dict[bytes, bytes] | None
                      ) -> Claim | None:
        run_id = (fields or {}).get(b"run", b"").decode()
        try:
            reply = await self._run("CLAIM", [keys.run_key(run_id), *keys.queue_keys(run_id)],
                                    ["", orjson.dumps(worker), entry_id])
        except ResponseError as exc:
            if "NOTFOUND" not in str(exc):
                raise
            reply = 0
        if not reply:  # parked or expired: the job is done
            await self._drop_job(entry_id)
            return None
        attempt, raw = int(reply[0]), reply[1]
        return Claim(run_id=run_id, attempt=attempt, resumed=attempt > 1,
                     record=decode_record(pairs(raw)))

    @guard
    async def heartbeat(self, worker: str) -> None:
        """See ``Backend.heartbeat``: one SET of the worker's liveness key (PX lease)."""
        await self._alive(worker)

    @guard
    async def finish(self, run_id: str, attempt: int) -> None:
        """See ``Backend.finish``: expire the run's keys, acknowledge its job."""
        job = await self._run("FINISH", keys.run_keys(run_id), [attempt, int(self.run_ttl)])
        await self._drop_job(job)

    @guard
    async def redispatch_stranded(self) -> list[str]:
        """See ``Backend.redispatch_stranded``: the cluster's dispatch marks older than
        ``STRANDED_AFTER_S`` (``RedisCore._mark``), at most ``SWEEP_BATCH`` per call: a run
        still ``queued`` gets its place in the tenant's index and its job (with its mark
        gone, in the job's round trip), unless it is its thread's waiting run (an
        interrupt's, dispatched when the thread settles); any other's mark just goes (the
        step died before queueing it, or it has run since). One node: nothing to sweep,
        every such step is one script."""
        if self._nodes is None:
            return []
        found: Any = await self.client.zrangebyscore(
            keys.DISPATCH_MARKS, "-inf", time.time() - STRANDED_AFTER_S, start=0,
            num=SWEEP_BATCH)
        dispatched = []
        for raw in found:
            mark = raw.decode()
            run_id = mark.rpartition("|")[0]
            record = await self.get_run(run_id)
            if record is not None and record.status == "queued" and \
                    not await self._waiting(run_id):
                # listed (the step may have died before the indexes too), then dispatched
                await self.client.zadd(keys.tenant_runs_key(record.tenant),
                                       {run_id: record.created_at})
                await self._list_thread(record.tenant, run_id)
                await self._woken(run_id, [mark])
                dispatched.append(run_id)
            else:
                await self.client.zrem(keys.DISPATCH_MARKS, mark)
        return dispatched

    async def _list_thread(self, tenant: str, run_id: str) -> None:
        """A thread run's thread in the tenant's thread index (a toolkit's first message
        creates the thread in the step that may have died before the index)."""
        thread_id = thread_of_run(run_id)
        if thread_id is None:
            return
        (created,) = await self._commands(
            ("HGET", keys.thread_key(thread_id, "thread"), "created_at"))
        if created:
            await self.client.zadd(keys.tenant_threads_key(tenant),
                                   {thread_id: float(bytes(created))})

    async def _waiting(self, run_id: str) -> bool:
        """Whether the run is its thread's waiting run (``next_run``)."""
        thread_id = thread_of_run(run_id)
        if thread_id is None:
            return False
        (waiting,) = await self._commands(
            ("HGET", keys.thread_key(thread_id, "thread"), "next_run"))
        return bool(waiting) and bytes(waiting).decode() == run_id

    @guard
    async def release_run(self, run_id: str, attempt: int) -> None:
        """See ``Backend.release_run``: a fresh job entry, so a waiting worker takes it now."""
        job = await self._run("RELEASE_RUN", [keys.run_key(run_id)], [attempt])
        await self._add_job(run_id)
        await self._drop_job(job)
