"""Threads for the Redis backend (a part of ``RedisBackend``).

Each change is one script of ``redis_thread_scripts`` on the thread's slot. The scripts take
the ids of the thread's active and waiting runs as expected values (every key they touch is
named in ``KEYS``, as Redis Cluster wants), so a call reads the thread first, then runs the
script, and reads again if the thread changed in between (``stale``). The global keys of a run
a script starts or wakes (its job, the tenant's run index, the parked index) are written by
the script itself on one node (``_dispatch``), so a process dying after it strands no run; on
a cluster, where they live in other slots, after it, as ``create_run`` does there; so is a
created thread's place in the tenant's thread index.
"""

from __future__ import annotations

from typing import Any

from app.engine.events import RunCreated, utc_now
from app.store.errors import (
    BackendError,
    IdempotencyConflict,
    NotLastReply,
    QueueFull,
    ThreadNotFound,
)
from app.store.ids import new_thread_run_id, thread_of_run
from app.store.records import RunRecord, first_event_body, now
from app.store.redis import keys
from app.store.redis.errors import guard
from app.store.redis.records import encode_record
from app.store.redis.thread_reads import RedisThreadReads, thread_fields
from app.store.thread_records import PostOutcome, ThreadPost, ThreadRecord, successor

ATTEMPTS = 100
"""Reads-then-script rounds before giving up on a thread that keeps changing."""
_NO_RUN = "run_-"
"""Stands in for an empty run role: names in the thread's slot that nothing uses."""


def role_keys(thread_id: str, run_id: str) -> list[str]:
    """A run role's eight keys; an empty role gets names in the thread's slot (never used)."""
    return keys.thread_run_keys(run_id or f"{_NO_RUN}_{thread_id}")


class RedisThreads(RedisThreadReads):
    """See ``app.store.contract.ThreadStore`` (the writes) and the module docstring."""

    async def _script(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        return await self._run(name, keys_, args)

    def _dispatch(self, tenant: str) -> list[str]:
        """The keys a thread script ends KEYS with on one node, so a run it starts or wakes
        is dispatched (and a new one indexed) in its own step (``thread_scripts._PRELUDE``);
        on a cluster none: the caller writes them after the script."""
        if self._nodes is not None:
            return []
        return [keys.JOBS_STREAM, keys.PARKED_INDEX, keys.tenant_runs_key(tenant),
                keys.tenant_threads_key(tenant)]

    @guard
    async def delete_thread(self, thread_id: str) -> None:
        """See ``ThreadStore.delete_thread``."""
        for _ in range(ATTEMPTS):
            record = await self.get_thread(thread_id)
            if record is None:
                return
            active, waiting = record.active_run or "", record.next_run or ""
            marks = await self._mark(active)
            answer, woken = await self._script("DELETE", [
                *keys.thread_keys(thread_id), *role_keys(thread_id, active),
                *role_keys(thread_id, waiting), *self._dispatch(record.tenant)],
                [active, waiting, self._notes(), thread_id, int(self.run_ttl), now()])
            # its parked active run, woken to end cancelled
            await self._woken(woken.decode() or None, marks)
            if answer != b"stale":
                await self.client.zrem(keys.tenant_threads_key(record.tenant), thread_id)
                return
        raise BackendError(f"thread {thread_id} kept changing")

    @guard
    async def post_thread_run(self, thread_id: str, post: ThreadPost) -> PostOutcome:
        """See ``ThreadStore.post_thread_run``."""
        await self._ensure_group()
        for _ in range(ATTEMPTS):
            record = await self.get_thread(thread_id)
            created = record is None and post.create is not None
            if created:
                record = post.create
            if record is None or record.tenant != post.tenant or (
                    post.owner is not None and record.owner != post.owner):
                raise ThreadNotFound(thread_id)
            post.candidate.owner = record.owner  # a thread's runs are its owner's
            if post.replaces is not None and thread_of_run(post.replaces) != record.id:
                raise NotLastReply(post.replaces)  # (its keys are in another slot)
            # the run this post may queue: its candidate on an idle thread (a busy thread's
            # candidate only ever waits its turn), else the active run (a steer or an
            # interrupt wakes it if parked)
            marks = await self._mark(record.active_run or post.candidate.id)
            status, payload, woken = await self._post_once(record, post, created=created)
            if status == "ok":
                outcome = _outcome(payload)
                await self._after_post(record, post, outcome, created=created)
                # the run to dispatch: the one the post started, or the parked active run an
                # interrupt or a steer woke
                started = outcome.action == "started"
                await self._woken(post.candidate.id if started else woken or None, marks,
                                  parked=not started)
                return outcome
            await self._woken(None, marks)
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
            if status == "not_last":
                raise NotLastReply(payload)
            if status == "full" and post.queue_limit is not None:
                raise QueueFull(payload, post.queue_limit)
            if status == "ended":
                await self.settle_thread(thread_id)
        raise BackendError(f"thread {thread_id} kept changing")

    async def _post_once(self, record: ThreadRecord, post: ThreadPost, *, created: bool
                         ) -> tuple[str, str, str]:
        active, waiting = record.active_run or "", record.next_run or ""
        create = thread_fields(record) if created else {}
        cand = post.candidate
        fields = [x for kv in encode_record(_first_seq(cand)).items() for x in kv]
        _, event = first_event_body(cand.id, post.first_event)
        idem = keys.thread_key(record.id, f"idem:{post.idempotency_key or ''}")
        args: list[Any] = [
            active, waiting, post.tenant, post.multitask,
            post.request_hash if post.idempotency_key is not None else "",
            int(self.thread_ttl), now(), self._notes(), record.id, cand.id, event,
            utc_now(), len(post.prompts), len(fields) // 2, *post.prompts, *post.message_ids,
            *fields, len(create), *(x for kv in create.items() for x in kv),
            post.replaces or "", "" if post.queue_limit is None else post.queue_limit]
        first = active or post.replaces or ""  # a regenerate's thread is idle: its A keys
        status, payload, woken = await self._script("POST", [
            *keys.thread_keys(record.id), *role_keys(record.id, first),
            *role_keys(record.id, waiting), *keys.thread_run_keys(cand.id), idem,
            *self._dispatch(record.tenant)], args)
        return status.decode(), payload.decode(), woken.decode()

    async def _after_post(self, record: ThreadRecord, post: ThreadPost, outcome: PostOutcome,
                          *, created: bool) -> None:
        """On a cluster the global keys but the job (``_woken``): a created thread's place in
        the tenant's index, a new run's (one node: the script wrote them)."""
        if self._nodes is None:
            return
        if created:
            await self.client.zadd(keys.tenant_threads_key(record.tenant),
                                   {record.id: record.created_at})
        if outcome.action not in ("started", "interrupted") or outcome.queued:
            return
        await self.client.zadd(keys.tenant_runs_key(record.tenant),
                               {post.candidate.id: post.candidate.created_at})

    @guard
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
            next_id = new_thread_run_id(record.id)
            marks = await self._mark(record.next_run or next_id)
            status, started = await self._settle_once(record, ended, next_id)
            if status == "ok" and started:
                await self._dispatch_thread_run(record.tenant, started, marks)
            else:
                await self._woken(None, marks)
            if status == "ok":
                return started or None
            if status != "stale":
                return None
        raise BackendError(f"thread {thread_id} kept changing")

    async def _settle_once(self, record: ThreadRecord, ended: RunRecord | None, next_id: str
                           ) -> tuple[str, str]:
        active, waiting = record.active_run or "", record.next_run or ""
        fields: list[Any] = []
        event = b""
        if ended is not None:
            after = successor(ended, next_id, now())
            fields = [x for kv in encode_record(after).items() for x in kv]
            event = first_event_body(next_id, RunCreated(model=ended.model))[1]
        status, started = await self._script("SETTLE", [
            *keys.thread_keys(record.id), *role_keys(record.id, active),
            *role_keys(record.id, waiting), *keys.thread_run_keys(next_id),
            *self._dispatch(record.tenant)],
            [active, waiting, next_id, now(), int(self.thread_ttl), self._notes(),
             record.id, event, len(fields) // 2, *fields])
        return status.decode(), started.decode()

    async def _dispatch_thread_run(self, tenant: str, run_id: str, marks: list[str]) -> None:
        """On a cluster, the run a settle started: its place in the tenant's index, its job
        (one node: the script wrote both)."""
        if self._nodes is None:
            return
        record = await self.get_run(run_id)
        if record is not None:
            await self.client.zadd(keys.tenant_runs_key(tenant), {run_id: record.created_at})
        await self._woken(run_id, marks, parked=False)

def _first_seq(record: RunRecord) -> RunRecord:
    record.last_seq = 1
    return record


def _outcome(payload: str) -> PostOutcome:
    action, run_id, flags, ids = payload.split("|")
    return PostOutcome(action=action, run_id=run_id, queued=flags[:1] == "1",  # type: ignore[arg-type]
                       in_queue=flags[1:2] == "1", message_ids=[i for i in ids.split(",") if i])

