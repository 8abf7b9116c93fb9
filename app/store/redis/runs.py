"""Runs, their logs and cancel on Redis (``RunStore``, ``EventLog``, ``CancelSignal``): every
per-run write one Lua script of ``scripts`` (atomic, fenced by the run's attempt)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from app.engine.events import ServiceEvent
from app.store.errors import BackendError, IdempotencyConflict
from app.store.paging import make_cursor, matches, parse_cursor
from app.store.records import (
    REQUIRES_ACTION,
    EventBatch,
    RunPage,
    RunRecord,
    StoredEvent,
    first_event_body,
    service_event_batch,
)
from app.store.redis import keys
from app.store.redis.core import RedisCore
from app.store.redis.errors import guard, mapped
from app.store.redis.lean_scripts import LeanScripts
from app.store.redis.records import decode_record, encode_fields, encode_record, pairs

ABANDONED_KEY_S = 30
"""Age (s) past which an Idempotency-Key naming a run that was never written is taken over:
a request's writes land or fail within the socket timeout (5 s) and one reconnect."""


class RedisRuns(RedisCore):
    """See the module docstring."""

    # -- runs --------------------------------------------------------------------------
    @guard
    async def create_run(self, record: RunRecord, *, idempotency_key: str | None = None,
                         request_hash: str | None = None,
                         first_event: ServiceEvent | None = None) -> tuple[RunRecord, bool]:
        """See ``Backend.create_run``."""
        if idempotency_key is not None:
            first = await self._idempotent(record, idempotency_key, request_hash or "")
            if first is not None:
                return first, False
        await self._ensure_group()
        run_writes: list[tuple[str | bytes, ...]] = []
        seq_1: StoredEvent | None = None
        if first_event is not None:
            record.last_seq = 1
            type_, data = first_event_body(record.id, first_event)
            seq_1 = StoredEvent(1, type_, data)
            run_writes.append(("XADD", keys.events_key(record.id), "1-0", "t", type_, "d", data))
        run_writes.append(("HSET", keys.run_key(record.id), *_flat(encode_record(record))))
        if self._nodes is not None:  # the run's slot, confirmed, strictly before its job
            def fill(pipe: Any) -> None:
                for command in run_writes:
                    pipe.execute_command(*command)

            marks = await self._mark(record.id)  # a death before the job: swept
            await self._nodes.durable(keys.run_key(record.id), fill)
            await self.client.zadd(keys.tenant_runs_key(record.tenant),
                                   {record.id: record.created_at})
            await self._woken(record.id, marks, parked=False)
        else:
            await self._commands(*run_writes,  # in order: the job last
                                 ("ZADD", keys.tenant_runs_key(record.tenant),
                                  repr(record.created_at), record.id),
                                 ("XADD", keys.JOBS_STREAM, "*", "run", record.id))
        if seq_1 is not None:
            self.fresh_runs.add(record.id, record.tenant, seq_1, record.owner)
        return record, True

    async def _idempotent(self, record: RunRecord, key: str, body_hash: str) -> RunRecord | None:
        """None when this request is the key's first (it creates ``record``), else the run of
        the request that was. The key is set before that run is written: a request that died
        in between (its process killed, its store gone) left a key naming a run that never
        came. Once the key is older than ``ABANDONED_KEY_S`` (every write of that request
        has landed or failed by then) the request asking now takes it over and creates its
        run; before, it is a 503 to retry."""
        name = keys.idempotency_key(record.tenant, key)
        value = f"{body_hash}|{record.id}"
        lifetime = int(self.run_ttl) + 86400
        if await self.client.set(name, value, nx=True, ex=lifetime):
            return None
        raw: Any = await self.client.get(name)
        seen = (raw or b"").decode()
        seen_hash, _, run_id = seen.rpartition("|")
        if seen_hash != body_hash:
            raise IdempotencyConflict(key)
        for _ in range(50):  # the first request may still be writing its run
            first = await self.get_run(run_id)
            if first is not None:
                return first
            await asyncio.sleep(0.02)
        young = (lifetime - ABANDONED_KEY_S) * 1000
        taken = int(await self._run("TAKE_OVER_KEY", [name],
                                    [seen, value, young, lifetime * 1000]))
        if taken == 1:
            return None
        if taken == 0:  # another request took it over meanwhile: its run is the one
            return await self._idempotent(record, key, body_hash)
        raise BackendError(f"idempotency key {key}: run {run_id} is not written yet")

    @guard
    async def list_runs(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                        limit: int, cursor: str | None, owner: str | None = None) -> RunPage:
        """See ``Backend.list_runs``: walks the tenant's zset newest first, filtering."""
        zkey = keys.tenant_runs_key(tenant)
        after = parse_cursor(cursor)
        top: float | str = after[0] if after else "+inf"
        page: list[RunRecord] = []
        offset, chunk = 0, max(limit + 1, 50)
        while len(page) <= limit:
            rows: Any = await self.client.zrevrangebyscore(zkey, top, "-inf", start=offset,
                                                      num=chunk, withscores=True)
            if not rows:
                break
            offset += len(rows)
            for record in await self._records([r[0].decode() for r in rows], zkey):
                if after is not None and (record.created_at, record.id) >= after:
                    continue
                if matches(record, status, metadata, owner) and len(page) <= limit:
                    page.append(record)
        more = len(page) > limit
        page = page[:limit]
        return RunPage(runs=page, next_cursor=make_cursor(page[-1]) if more else None)

    async def _records(self, run_ids: list[str], zkey: str) -> list[RunRecord]:
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(keys.run_key(run_id))
            raw = await pipe.execute()
        records = [decode_record(r) for r in raw]
        gone = [i for i, r in zip(run_ids, records, strict=True) if r is None]
        if gone:  # expired runs leave their index entry behind
            await self.client.zrem(zkey, *gone)
        return [r for r in records if r is not None]

    @guard
    async def update_run(self, run_id: str, attempt: int, **fields: Any) -> None:
        """See ``Backend.update_run``."""
        pairs = [x for kv in encode_fields(fields).items() for x in kv]
        await self._run("UPDATE", [keys.run_key(run_id)], [attempt, *pairs])

    @guard
    async def expires_in(self, run_id: str) -> float | None:
        """Seconds until the run's keys expire (None: no TTL yet)."""
        ttl = await self.client.pttl(keys.run_key(run_id))
        return ttl / 1000 if ttl >= 0 else None

    # -- checkpoints and events -------------------------------------------------------
    @guard
    async def load_checkpoint(self, run_id: str) -> list[dict[str, Any]]:
        """See ``Backend.load_checkpoint``."""
        return [orjson.loads(m) for m in await self.client.lrange(keys.checkpoint_key(run_id),
                                                                  0, -1)]

    async def append_service_event(self, run_id: str, event: ServiceEvent) -> int:
        """See ``EventLog.append_service_event``."""
        return await self.append_events(run_id, None, service_event_batch(run_id, event))

    def append_soon(self, run_id: str, attempt: int | None, batch: EventBatch,
                    done: Callable[[int, BaseException | None], None]
                    ) -> asyncio.Future[Any] | None:
        """``append_events`` without a coroutine (``run_sink.AppendsSoon``), on the lean
        connection; None without one. ``done(last_seq, None)``, or ``done(0, error)`` with the
        backend's exception, once Redis answers; the future returned is settled right after (wait
        on it; its own result is the raw reply, its error redis-py's)."""
        if not isinstance(self._pipeline, LeanScripts):
            return None
        run_keys, args = self._append_call(run_id, attempt, batch)
        future = self._pipeline.call_soon(self._s["APPEND"], run_keys, args, linger=True)
        future.add_done_callback(functools.partial(_appended, done))
        return future

    @guard
    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """See ``Backend.read_events``."""
        (rows,) = await self._commands(_xrange(run_id, after, limit))
        return _stored(rows)

    @guard
    async def get_run_and_events(self, run_id: str, after: int, limit: int
                                 ) -> tuple[RunRecord | None, list[StoredEvent]]:
        """See ``Backend.get_run_and_events``: HGETALL and XRANGE in one round trip."""
        raw, rows = await self._commands(("HGETALL", keys.run_key(run_id)),
                                         _xrange(run_id, after, limit))
        return decode_record(pairs(raw)), _stored(rows)

    async def wait_events(self, run_id: str, after: int, timeout: float, *,  # noqa: ASYNC109
                          parked: bool = False) -> list[StoredEvent]:
        """See ``Backend.wait_events`` (woken by the process's one notify listener, which also
        hands over the batch it announced, or by a ``p:`` note when the run parks): the waiter
        is registered before anything is checked, so a batch or a park landing in between
        still wakes it."""
        notes = self.notifier
        await notes.follow(run_id)
        waiter = notes.events_waiter(run_id)
        if notes.watch(run_id) != after:  # not known to be caught up: look in the log
            events = notes.events_after(run_id, after) or await self.read_events(run_id, after)
            if events:
                return events
        if parked and await self._status(run_id) == REQUIRES_ACTION:
            return []
        try:
            async with asyncio.timeout(timeout):
                await waiter.wait()
        except TimeoutError:
            return []
        return notes.events_after(run_id, after) or await self.read_events(run_id, after)

    # -- cancel -----------------------------------------------------------------------
    @guard
    async def request_cancel(self, run_id: str) -> None:
        """See ``CancelSignal.request_cancel``: a flag on the run plus a ``c:<run>`` note; a
        parked run is set ``queued`` in the same script, then dispatched."""
        marks = await self._mark(run_id)
        woken = await self._run("CANCEL", [keys.run_key(run_id), *self._dispatch_keys()],
                                ["", self._channel(run_id), f"c:{run_id}"])
        await self._woken(run_id if woken == b"woken" else None, marks)

    async def wait_cancel(self, run_id: str) -> None:
        """See ``Backend.wait_cancel``."""
        waiter = self.notifier.cancel_waiter(run_id)
        try:
            await self.notifier.follow(run_id)
            if not await _quietly(self.cancel_requested(run_id)):
                await waiter.wait()
        finally:
            self.notifier.forget_cancel(run_id)


    # -- counters -----------------------------------------------------------------------
    @guard
    async def count_hit(self, key: str, window: float) -> tuple[int, float]:
        """See ``Counters.count_hit``: INCR, the window's expiry set by its first hit."""
        hits, left = await self._run("COUNT_HIT", [keys.counter_key(key)],
                                     [max(1, int(window * 1000))])
        return int(hits), int(left) / 1000

async def _quietly(check: Awaitable[bool]) -> bool:
    try:
        return await check
    except BackendError:
        return False


def _appended(done: Callable[[int, BaseException | None], None],
              future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        done(0, BackendError("redis: the write was cancelled"))
    elif (error := future.exception()) is not None:
        done(0, mapped(error))
    else:
        done(int(future.result()), None)


def _xrange(run_id: str, after: int, limit: int) -> tuple[str, ...]:
    return ("XRANGE", keys.events_key(run_id), f"{max(after, 0) + 1}-0", "+", "COUNT", str(limit))


def _flat(mapping: dict[str | bytes, bytes]) -> list[str | bytes]:
    """A field/value mapping as HSET's arguments."""
    return [item for pair in mapping.items() for item in pair]


def _stored(rows: Any) -> list[StoredEvent]:
    """XRANGE rows (each entry's fields a dict from redis-py, a flat list from RESP2)."""
    return [StoredEvent(int(eid.split(b"-", 1)[0]), *_event_fields(f)) for eid, f in rows]


def _event_fields(fields: Any) -> tuple[str, bytes]:
    f = pairs(fields)
    return f[b"t"].decode(), f[b"d"]
