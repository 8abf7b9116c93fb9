"""Threads for the Redis backend (a mixin of ``RedisBackend``).

Each change is one script of ``redis_thread_scripts`` on the thread's slot. The scripts take
the ids of the thread's active and waiting runs as expected values (every key they touch is
named in ``KEYS``, as Redis Cluster wants), so a call reads the thread first, then runs the
script, and reads again if the thread changed in between (``stale``). Global keys (the job
stream, the tenant's thread index) are written after the script, as ``create_run`` does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import orjson
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import RedisError, ResponseError

from app.backends import redis_keys as keys
from app.backends import redis_thread_scripts as lua
from app.backends.base import BackendError, IdempotencyConflict, RunRecord, first_event_body, now
from app.backends.redis_cluster import ClusterScripts, NodeClients
from app.backends.redis_notify import Notifier
from app.backends.redis_pipeline import ScriptPipeline
from app.backends.redis_records import encode_record
from app.events import RunCreated, utc_now
from app.threads.ids import new_thread_run_id, thread_of_run
from app.threads.model import (
    PostOutcome,
    ThreadNotFound,
    ThreadPage,
    ThreadPost,
    ThreadRecord,
    parse_thread_cursor,
    successor,
    thread_cursor,
    thread_matches,
)
from app.threads.store import DEFAULT_THREAD_TTL

P = ParamSpec("P")
T = TypeVar("T")
ATTEMPTS = 100
"""Reads-then-script rounds before giving up on a thread that keeps changing."""
_NO_RUN = "run_-"
"""Stands in for a run role that is empty (its keys are in no slot anyone uses)."""


def _guard(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except (RedisError, OSError) as exc:
            if isinstance(exc, ResponseError) and "NOSCRIPT" not in str(exc):
                raise BackendError(str(exc)) from exc
            raise BackendError(f"redis: {exc}") from exc

    return wrapper


def _role_keys(thread_id: str, run_id: str) -> list[str]:
    """A run role's eight keys; an empty role gets names in the thread's slot (never used)."""
    return keys.thread_run_keys(run_id or new_thread_run_id(thread_id).replace(
        "run_", _NO_RUN, 1))


def _decode_thread(raw: dict[bytes, bytes], runs: list[bytes]) -> ThreadRecord | None:
    if not raw or b"id" not in raw:
        return None
    text = {k.decode(): v.decode() for k, v in raw.items()}
    return ThreadRecord(id=text["id"], tenant=text["tenant"],
                        created_at=float(text["created_at"]),
                        updated_at=float(text.get("updated_at") or text["created_at"]),
                        metadata=orjson.loads(text.get("metadata") or "{}"),
                        active_run=text.get("active_run") or None,
                        next_run=text.get("next_run") or None,
                        runs=[r.decode() for r in runs])


class RedisThreads:
    """See the module docstring (and ``app.threads.store.ThreadStore``)."""

    thread_ttl: float = DEFAULT_THREAD_TTL
    run_ttl: float
    client: Redis | RedisCluster
    notifier: Notifier
    _pipeline: ScriptPipeline | ClusterScripts

    _nodes: NodeClients | None

    def _notes(self) -> str:
        """The scripts' notes channel: ``al:notify``; '' on a cluster (each note then goes
        to its run's or thread's shard channel, in the thread's slot)."""
        return keys.NOTIFY_CHANNEL if self._nodes is None else ""

    async def _ensure_group(self) -> None:
        raise NotImplementedError

    async def get_run(self, run_id: str) -> RunRecord | None:
        raise NotImplementedError

    def _thread_script(self, name: str) -> Any:
        scripts: dict[str, Any] | None = self.__dict__.get("_thread_scripts")
        if scripts is None:
            scripts = self.__dict__["_thread_scripts"] = {
                n: self.client.register_script(getattr(lua, n))
                for n in ("SETTLE", "POST", "DELETE")}
        return scripts[name]

    async def _script(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        return await self._pipeline.call(self._thread_script(name), keys_, args)

    @_guard
    async def create_thread(self, record: ThreadRecord) -> None:
        """See ``ThreadStore.create_thread``."""
        thread = keys.thread_key(record.id, "thread")
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(thread, mapping={
                "id": record.id, "tenant": record.tenant, "created_at": repr(record.created_at),
                "updated_at": repr(record.updated_at), "metadata": orjson.dumps(record.metadata),
                "active_run": "", "next_run": ""})
            pipe.expire(thread, int(self.thread_ttl))
            pipe.zadd(keys.tenant_threads_key(record.tenant), {record.id: record.created_at})
            await pipe.execute()

    @_guard
    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """See ``ThreadStore.get_thread``."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.thread_key(thread_id, "thread"))
            pipe.lrange(keys.thread_key(thread_id, "runs"), 0, -1)
            raw, runs = await pipe.execute()
        return _decode_thread(raw, runs)

    @_guard
    async def list_threads(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                           limit: int, cursor: str | None) -> ThreadPage:
        """See ``ThreadStore.list_threads``: the tenant's zset newest first, filtered."""
        zkey = keys.tenant_threads_key(tenant)
        after = parse_thread_cursor(cursor)
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
                if thread_matches(record, status, metadata) and len(page) <= limit:
                    page.append(record)
        more = len(page) > limit
        page = page[:limit]
        return ThreadPage(threads=page, next_cursor=thread_cursor(page[-1]) if more else None)

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

    @_guard
    async def delete_thread(self, thread_id: str) -> None:
        """See ``ThreadStore.delete_thread``."""
        for _ in range(ATTEMPTS):
            record = await self.get_thread(thread_id)
            if record is None:
                return
            active, waiting = record.active_run or "", record.next_run or ""
            answer = await self._script("DELETE", [
                *keys.thread_keys(thread_id), *_role_keys(thread_id, active),
                *_role_keys(thread_id, waiting)],
                [active, waiting, self._notes(), thread_id, int(self.run_ttl), now()])
            if answer != b"stale":
                await self.client.zrem(keys.tenant_threads_key(record.tenant), thread_id)
                return
        raise BackendError(f"thread {thread_id} kept changing")

    @_guard
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

    @_guard
    async def thread_run_inputs(self, run_id: str) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
        """See ``ThreadStore.thread_run_inputs``."""
        thread_id = thread_of_run(run_id) or ""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.lrange(keys.thread_key(thread_id, "msgs"), 0, -1)
            pipe.lrange(keys.input_key(run_id), 0, -1)
            history, prompts = await pipe.execute()
        return [orjson.loads(m) for m in history], [orjson.loads(m) for m in prompts]

    @_guard
    async def post_thread_run(self, thread_id: str, post: ThreadPost) -> PostOutcome:
        """See ``ThreadStore.post_thread_run``."""
        await self._ensure_group()
        for _ in range(ATTEMPTS):
            record = await self.get_thread(thread_id)
            if record is None or record.tenant != post.tenant:
                raise ThreadNotFound(thread_id)
            status, payload = await self._post_once(record, post)
            if status == "ok":
                outcome = _outcome(payload)
                await self._after_post(record, post, outcome)
                return outcome
            if status == "repeat":
                digest, outcome = PostOutcome.decode(payload)
                if digest != post.request_hash:
                    raise IdempotencyConflict(post.idempotency_key or "")
                return outcome
            if status == "busy":
                return PostOutcome(action="rejected", run_id=payload, queued=False,
                                   message_ids=[])
            if status == "gone":
                raise ThreadNotFound(thread_id)
            if status == "ended":
                await self.settle_thread(thread_id)
        raise BackendError(f"thread {thread_id} kept changing")

    async def _post_once(self, record: ThreadRecord, post: ThreadPost) -> tuple[str, str]:
        active, waiting = record.active_run or "", record.next_run or ""
        cand = post.candidate
        fields = [x for kv in encode_record(_first_seq(cand)).items() for x in kv]
        _, event = first_event_body(cand.id, post.first_event)
        idem = keys.thread_key(record.id, f"idem:{post.idempotency_key or ''}")
        args: list[Any] = [
            active, waiting, post.tenant, post.multitask,
            post.request_hash if post.idempotency_key is not None else "",
            int(self.thread_ttl), now(), self._notes(), record.id, cand.id, event,
            utc_now(), len(post.prompts), len(fields) // 2, *post.prompts, *post.message_ids,
            *fields]
        status, payload = await self._script("POST", [
            *keys.thread_keys(record.id), *_role_keys(record.id, active),
            *_role_keys(record.id, waiting), *keys.thread_run_keys(cand.id), idem], args)
        return status.decode(), payload.decode()

    async def _after_post(self, record: ThreadRecord, post: ThreadPost,
                          outcome: PostOutcome) -> None:
        """The global keys of a new run: the tenant's index, and its job once it may run."""
        if outcome.action not in ("started", "interrupted") or outcome.queued:
            return
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zadd(keys.tenant_runs_key(record.tenant),
                      {post.candidate.id: post.candidate.created_at})
            if outcome.action == "started":
                pipe.xadd(keys.JOBS_STREAM, {"run": post.candidate.id})
            await pipe.execute()

    @_guard
    async def settle_thread(self, thread_id: str) -> str | None:
        """See ``ThreadStore.settle_thread``."""
        await self._ensure_group()
        for _ in range(ATTEMPTS):
            record = await self.get_thread(thread_id)
            if record is None or record.active_run is None:
                return None
            ended = await self.get_run(record.active_run)
            if ended is not None and ended.status not in ("completed", "failed", "cancelled"):
                return None
            status, started = await self._settle_once(record, ended)
            if status == "ok":
                if started:
                    await self._dispatch_thread_run(record.tenant, started)
                return started or None
            if status != "stale":
                return None
        raise BackendError(f"thread {thread_id} kept changing")

    async def _settle_once(self, record: ThreadRecord, ended: RunRecord | None
                           ) -> tuple[str, str]:
        active, waiting = record.active_run or "", record.next_run or ""
        next_id = new_thread_run_id(record.id)
        fields: list[Any] = []
        event = b""
        if ended is not None:
            after = successor(ended, next_id, now())
            fields = [x for kv in encode_record(after).items() for x in kv]
            event = first_event_body(next_id, RunCreated(model=ended.model))[1]
        status, started = await self._script("SETTLE", [
            *keys.thread_keys(record.id), *_role_keys(record.id, active),
            *_role_keys(record.id, waiting), *keys.thread_run_keys(next_id)],
            [active, waiting, next_id, now(), int(self.thread_ttl), self._notes(),
             record.id, event, len(fields) // 2, *fields])
        return status.decode(), started.decode()

    async def _dispatch_thread_run(self, tenant: str, run_id: str) -> None:
        record = await self.get_run(run_id)
        async with self.client.pipeline(transaction=False) as pipe:
            if record is not None:
                pipe.zadd(keys.tenant_runs_key(tenant), {run_id: record.created_at})
            pipe.xadd(keys.JOBS_STREAM, {"run": run_id})
            await pipe.execute()

    async def wait_thread(self, thread_id: str, runs: int,
                          timeout: float) -> ThreadRecord | None:  # noqa: ASYNC109
        """See ``ThreadStore.wait_thread`` (woken by the thread's ``e:<thread>`` notes)."""
        import asyncio

        waiter = self.notifier.events_waiter(thread_id)
        await self.notifier.follow(thread_id)
        record = await self.get_thread(thread_id)
        if record is None or len(record.runs) > runs:
            return record
        try:
            async with asyncio.timeout(timeout):
                await waiter.wait()
        except TimeoutError:
            return record
        return await self.get_thread(thread_id)


def _first_seq(record: RunRecord) -> RunRecord:
    record.last_seq = 1
    return record


def _outcome(payload: str) -> PostOutcome:
    action, run_id, flags, ids = payload.split("|")
    return PostOutcome(action=action, run_id=run_id, queued=flags[:1] == "1",  # type: ignore[arg-type]
                       in_queue=flags[1:2] == "1", message_ids=[i for i in ids.split(",") if i])

