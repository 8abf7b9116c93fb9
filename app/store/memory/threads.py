"""Threads for the in-process backend (a part of ``MemoryBackend``).

Each operation runs without an ``await`` between its reads and writes, so on one event loop it
is as atomic as the Redis backend's scripts. A thread's history and run inputs are JSON bytes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from app.engine.events import MessageQueued, RunCreated, json_bytes
from app.engine.queues import QueuedMessage, QueueKind
from app.store.errors import IdempotencyConflict, NotLastReply, QueueFull, ThreadNotFound
from app.store.ids import new_thread_run_id
from app.store.memory.core import RunState, ThreadState, copy_run, copy_thread
from app.store.memory.thread_reads import MemoryThreadReads
from app.store.records import TERMINAL, RunRecord, first_event_body, now
from app.store.thread_records import PostOutcome, ThreadPost, ThreadRecord, successor
from providers.messages import UserMessage, message_adapter

QUEUED_ACTION = {"enqueue": "queued", "steer": "steered", "interrupt": "interrupted"}
LEFTOVER_ORDER: tuple[tuple[str, QueueKind], ...] = (
    ("inflight", "steer"), ("queue", "steer"), ("inflight", "follow_up"), ("queue", "follow_up"))
"""The order messages a run never took are carried into the next run."""


class MemoryThreads(MemoryThreadReads):
    """See ``app.store.contract.ThreadStore`` (the writes)."""

    async def create_thread(self, record: ThreadRecord) -> None:
        """See ``ThreadStore.create_thread``."""
        thread = self._threads[record.id] = ThreadState(copy_thread(record))
        self._touch(thread)

    async def create_thread_if_absent(self, record: ThreadRecord) -> bool:
        """See ``ThreadStore.create_thread_if_absent``."""
        if self._thread(record.id) is not None:
            return False
        await self.create_thread(record)
        return True

    async def delete_thread(self, thread_id: str) -> None:
        """See ``ThreadStore.delete_thread``."""
        thread = self._threads.pop(thread_id, None)
        if thread is None:
            return
        if thread.record.active_run:
            self._cancel_run(thread.record.active_run)
        waiting = self._record(thread.record.next_run or "")
        if waiting is not None:
            waiting.status, waiting.stop_reason, waiting.ended_at = "cancelled", "aborted", now()
            waiting.error = "the thread was deleted"
            self._expires[waiting.id] = now() + self.run_ttl
        thread.wake()

    async def post_thread_run(self, thread_id: str, post: ThreadPost) -> PostOutcome:
        """See ``ThreadStore.post_thread_run``."""
        thread = self._thread(thread_id)
        if thread is None and post.create is not None:
            thread = self._threads[thread_id] = ThreadState(copy_thread(post.create))
        if thread is None or thread.record.tenant != post.tenant or (
                post.owner is not None and thread.record.owner != post.owner):
            raise ThreadNotFound(thread_id)
        post.candidate.owner = thread.record.owner  # a thread's runs are its owner's
        key = post.idempotency_key
        if key is not None and key in thread.idem:
            digest, outcome = PostOutcome.decode(thread.idem[key])
            if digest != post.request_hash:
                raise IdempotencyConflict(key)
            return outcome
        self._settle_now(thread)
        outcome = self._post_now(thread, post)
        if outcome.action != "rejected":
            thread.record.updated_at = now()
            if key is not None:
                thread.idem[key] = outcome.encode(post.request_hash)
        self._touch(thread)
        return outcome

    async def settle_thread(self, thread_id: str) -> str | None:
        """See ``ThreadStore.settle_thread``."""
        thread = self._thread(thread_id)
        if thread is None:
            return None
        started = self._settle_now(thread)
        self._touch(thread)
        return started

    # -- the atomic steps ---------------------------------------------------------------
    def _post_now(self, thread: ThreadState, post: ThreadPost) -> PostOutcome:
        rec = thread.record
        ids = list(post.message_ids)
        if rec.active_run is None:
            if post.replaces is not None:
                self._replace_now(thread, post.replaces, post.candidate.id)
            self._new_run(thread, post, dispatch=True)
            rec.active_run = post.candidate.id
            return PostOutcome(action="started", run_id=rec.active_run, queued=False,
                               message_ids=ids)
        if post.multitask == "reject":
            return PostOutcome(action="rejected", run_id=rec.active_run, queued=False,
                               message_ids=[])
        action: Any = QUEUED_ACTION[post.multitask]
        limit = post.queue_limit
        if rec.next_run:
            waiting = thread.inputs.setdefault(rec.next_run, [])
            if limit is not None and len(waiting) + len(post.prompts) > limit:
                raise QueueFull(rec.next_run, limit)
            waiting.extend(post.prompts)
            return PostOutcome(action=action, run_id=rec.next_run, queued=True, message_ids=ids)
        if post.multitask == "interrupt":
            self._cancel_run(rec.active_run)
            self._new_run(thread, post, dispatch=False)
            rec.next_run = post.candidate.id
            return PostOutcome(action=action, run_id=rec.next_run, queued=False, message_ids=ids)
        kind: QueueKind = "steer" if post.multitask == "steer" else "follow_up"
        queues = self._state[rec.active_run].queues
        if limit is not None and sum(map(len, queues.values())) + len(post.prompts) > limit:
            raise QueueFull(rec.active_run, limit)
        queue = queues[kind]
        for message_id, raw in zip(post.message_ids, post.prompts, strict=True):
            queue.append(QueuedMessage(id=message_id, message=_user(raw)))
            self._log(rec.active_run, MessageQueued(message_id=message_id, kind=kind))
        if kind == "steer":  # a parked run goes on with the steer (its picks skipped)
            self._wake_parked(rec.active_run)
        return PostOutcome(action=action, run_id=rec.active_run, queued=True, message_ids=ids,
                           in_queue=True)

    def _replace_now(self, thread: ThreadState, run_id: str, by: str) -> None:
        """The thread's last run's messages leave its history (``ThreadPost.replaces``)."""
        replaced = self._record(run_id)
        if not thread.record.runs or thread.record.runs[-1] != run_id or replaced is None:
            raise NotLastReply(run_id)
        state = self._state.get(run_id)
        added = len(state.ckpt) if state and state.ckpt else len(thread.inputs.get(run_id, []))
        del thread.msgs[len(thread.msgs) - added:]
        replaced.replaced_by = by

    def _settle_now(self, thread: ThreadState) -> str | None:
        rec = thread.record
        if rec.active_run is None:
            return None
        ended = self._record(rec.active_run)
        if ended is not None and ended.status not in TERMINAL:
            return None
        state = self._state.get(rec.active_run)
        thread.msgs += state.ckpt if state and state.ckpt else thread.inputs.get(
            rec.active_run, [])
        left = _leftovers(state) if state is not None else []
        start = rec.next_run
        if start:
            thread.inputs[start] = left + thread.inputs.get(start, [])
        elif left and ended is not None:
            start = new_thread_run_id(rec.id)
            self._store_run(thread, successor(ended, start, now()), left)
        rec.active_run, rec.next_run, rec.updated_at = start, None, now()
        if start:
            self._push_job(start)
        thread.wake()
        return start

    def _new_run(self, thread: ThreadState, post: ThreadPost, *, dispatch: bool) -> None:
        self._store_run(thread, post.candidate, list(post.prompts), post)
        if dispatch:
            self._push_job(post.candidate.id)

    def _store_run(self, thread: ThreadState, record: RunRecord, prompts: list[bytes],
                   post: ThreadPost | None = None) -> None:
        state = self._state[record.id] = RunState()
        event = post.first_event if post else RunCreated(model=record.model)
        record.last_seq = 1
        state.events.append((1, *first_event_body(record.id, event)))
        self._runs[record.id] = copy_run(record)
        thread.inputs[record.id] = prompts
        thread.record.runs.append(record.id)
        thread.record.updated_at = now()
        thread.wake()

    def _touch(self, thread: ThreadState) -> None:
        """Activity: an idle thread expires ``thread_ttl`` s from now, a busy one never."""
        busy = thread.record.active_run is not None
        thread.expires = None if busy else now() + self.thread_ttl


def _leftovers(state: RunState) -> list[bytes]:
    """Messages the run never took (or took and never injected), emptied out of its queues."""
    out: list[bytes] = []
    for where, kind in LEFTOVER_ORDER:
        items = state.inflight[kind] if where == "inflight" else state.queues[kind]
        out += [json_bytes(q.message) for q in items]
        if where == "inflight":
            state.inflight[kind] = []
        else:
            state.queues[kind] = deque()
    return out


def _user(raw: bytes) -> UserMessage:
    message = message_adapter.validate_json(raw)
    assert isinstance(message, UserMessage)
    return message



