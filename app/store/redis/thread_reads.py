"""Reading threads on Redis (the read half of ``RedisThreads``): records, listing, history,
a run's inputs, and waiting for a thread's next run (its ``e:<thread>`` notes)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from app.store.ids import thread_of_run
from app.store.paging import make_cursor, matches, parse_cursor
from app.store.redis import keys
from app.store.redis.core import RedisCore
from app.store.redis.errors import guard
from app.store.thread_records import ThreadPage, ThreadRecord


def _decode_thread(raw: dict[bytes, bytes], runs: list[bytes]) -> ThreadRecord | None:
    if not raw or b"id" not in raw:
        return None
    text = {k.decode(): v.decode() for k, v in raw.items()}
    return ThreadRecord(id=text["id"], tenant=text["tenant"],
                        created_at=float(text["created_at"]),
                        updated_at=float(text.get("updated_at") or text["created_at"]),
                        metadata=orjson.loads(text.get("metadata") or "{}"),
                        owner=text.get("owner") or None,
                        active_run=text.get("active_run") or None,
                        next_run=text.get("next_run") or None,
                        runs=[r.decode() for r in runs])


_CREATE_IF_ABSENT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""


def thread_fields(record: ThreadRecord) -> dict[Any, Any]:
    """A new idle thread's hash."""
    return {"id": record.id, "tenant": record.tenant, "created_at": repr(record.created_at),
            "updated_at": repr(record.updated_at), "metadata": orjson.dumps(record.metadata),
            "owner": record.owner or "", "active_run": "", "next_run": ""}


class RedisThreadReads(RedisCore):
    """See ``app.store.contract.ThreadStore`` (the reads, and creating a thread)."""

    @guard
    async def create_thread(self, record: ThreadRecord) -> None:
        """See ``ThreadStore.create_thread``."""
        thread = keys.thread_key(record.id, "thread")
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(thread, mapping=thread_fields(record))
            pipe.expire(thread, int(self.thread_ttl))
            pipe.zadd(keys.tenant_threads_key(record.tenant), {record.id: record.created_at})
            await pipe.execute()

    @guard
    async def create_thread_if_absent(self, record: ThreadRecord) -> bool:
        """See ``ThreadStore.create_thread_if_absent``: one script on the thread's hash (its
        slot), then the tenant's index (idempotent)."""
        fields = thread_fields(record)
        flat = [x for pair in fields.items() for x in pair]
        created = await self.client.eval(
            _CREATE_IF_ABSENT, 1, keys.thread_key(record.id, "thread"),
            int(self.thread_ttl), *flat)
        if created:
            await self.client.zadd(keys.tenant_threads_key(record.tenant),
                                   {record.id: record.created_at})
        return bool(created)

    @guard
    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """See ``ThreadStore.get_thread``."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.thread_key(thread_id, "thread"))
            pipe.lrange(keys.thread_key(thread_id, "runs"), 0, -1)
            raw, runs = await pipe.execute()
        return _decode_thread(raw, runs)

    @guard
    async def list_threads(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                           limit: int, cursor: str | None,
                           owner: str | None = None) -> ThreadPage:
        """See ``ThreadStore.list_threads``: the tenant's zset newest first, filtered."""
        zkey = keys.tenant_threads_key(tenant)
        after = parse_cursor(cursor)
        top: float | str = after[0] if after else "+inf"
        page: list[ThreadRecord] = []
        offset, chunk = 0, max(limit + 1, 50)
        while len(page) <= limit:
            rows: Any = await self.client.zrevrangebyscore(zkey, top, "-inf", start=offset,
                                                           num=chunk)
            if not rows:
                break
            offset += len(rows)
            for record in await self._threads_of([r.decode() for r in rows], zkey):
                if after is not None and (record.created_at, record.id) >= after:
                    continue
                if matches(record, status, metadata, owner) and len(page) <= limit:
                    page.append(record)
        more = len(page) > limit
        page = page[:limit]
        return ThreadPage(threads=page, next_cursor=make_cursor(page[-1]) if more else None)

    async def _threads_of(self, ids: list[str], zkey: str) -> list[ThreadRecord]:
        async with self.client.pipeline(transaction=False) as pipe:
            for thread_id in ids:
                pipe.hgetall(keys.thread_key(thread_id, "thread"))
                pipe.lrange(keys.thread_key(thread_id, "runs"), 0, -1)
            raw = await pipe.execute()
        found = [_decode_thread(raw[i], raw[i + 1]) for i in range(0, len(raw), 2)]
        gone = [t for t, r in zip(ids, found, strict=True) if r is None]
        if gone:  # expired threads leave their index entry behind
            await self.client.zrem(zkey, *gone)
        return [r for r in found if r is not None]

    @guard
    async def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        """See ``ThreadStore.thread_messages``."""
        record = await self.get_thread(thread_id)
        if record is None:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.lrange(keys.thread_key(thread_id, "msgs"), 0, -1)
            if record.active_run:
                pipe.lrange(keys.checkpoint_key(record.active_run), 0, -1)
                pipe.lrange(keys.input_key(record.active_run), 0, -1)
            found = await pipe.execute()
        history = list(found[0])
        if record.active_run:
            history += found[1] or found[2]
        return [orjson.loads(m) for m in history]

    @guard
    async def thread_run_inputs(self, run_id: str) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
        """See ``ThreadStore.thread_run_inputs``."""
        thread_id = thread_of_run(run_id) or ""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.lrange(keys.thread_key(thread_id, "msgs"), 0, -1)
            pipe.lrange(keys.input_key(run_id), 0, -1)
            history, prompts = await pipe.execute()
        return [orjson.loads(m) for m in history], [orjson.loads(m) for m in prompts]

    async def wait_thread(self, thread_id: str, runs: int,
                          timeout: float) -> ThreadRecord | None:  # noqa: ASYNC109
        """See ``ThreadStore.wait_thread`` (woken by the thread's ``e:<thread>`` notes)."""
        waiter = self.notifier.events_waiter(thread_id)
        await self.notifier.follow(thread_id)  # on a cluster: the thread's shard channel
        record = await self.get_thread(thread_id)
        if record is None or len(record.runs) > runs:
            return record
        try:
            async with asyncio.timeout(timeout):
                await waiter.wait()
        except TimeoutError:
            return record
        return await self.get_thread(thread_id)
