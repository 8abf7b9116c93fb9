"""The in-process backend: one process, nothing to install (the default without Redis).

Same contract as the Redis backend (tests/backends runs one suite against both): seqs allocated
at append, fenced writes, in-flight queue lists, leases renewed by heartbeats and taken over
once they lapse. State lives in dicts; waiters are ``asyncio.Event``s replaced on every wake.
Nothing survives the process, so "crash recovery" here only covers a worker task that stops
heartbeating.
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from app.engine.events import ServiceEvent
from app.engine.queues import QueuedMessage, QueueKind, QueueMode
from app.store.contract import (
    TERMINAL,
    Claim,
    EventBatch,
    FencedOut,
    IdempotencyConflict,
    QueueItemTaken,
    RunEnded,
    RunNotFound,
    RunPage,
    RunRecord,
    ServiceEvents,
    StoredEvent,
    first_event_body,
    now,
    queue_event_body,
    with_seq,
)
from app.store.live_feed import LiveFeeds
from app.store.memory.parking import MemoryParking
from app.store.memory.threads import MemoryThreads

KINDS: tuple[QueueKind, QueueKind] = ("steer", "follow_up")


class _RunState:
    """Everything stored for one run besides its record."""

    __slots__ = ("ckpt", "closed", "events", "inflight", "last_token", "queues", "taken",
                 "took", "waiter")

    def __init__(self) -> None:
        self.events: list[tuple[int, str, bytes]] = []
        """The log as plain ``(seq, type, data)`` tuples, handed out as ``StoredEvent``s: the
        collector stops tracking a tuple of ints, strings and bytes after its first pass, so
        a run's thousands of stored events are not walked again by every young and full
        collection (StoredEvent objects were 40 % of the young generation with 300 live
        streams, and a 100+ ms young collection set the lag p99)."""
        self.ckpt: list[bytes] = []
        self.queues: dict[str, deque[QueuedMessage]] = {k: deque() for k in KINDS}
        self.inflight: dict[str, list[QueuedMessage]] = {k: [] for k in KINDS}
        self.taken: set[str] = set()
        self.took: dict[str, tuple[str, set[str]]] = {}
        """Per queue, the token of the last ``take`` and the ids it took (Backend.take)."""
        self.last_token: str | None = None
        self.closed = False
        """The loop is ending: ``enqueue`` refuses (``close_queues``)."""
        self.waiter = asyncio.Event()


class MemoryBackend(MemoryThreads, MemoryParking, ServiceEvents):
    """Runs, logs, queues and dispatch in dicts. ``lease``: seconds a claim lasts without a
    heartbeat; ``run_ttl``: seconds a finished run is kept."""

    name = "memory"

    def __init__(self, *, lease: float = 5.0, run_ttl: float = 7 * 86400.0) -> None:
        self.lease = lease
        self.run_ttl = run_ttl
        self._runs: dict[str, RunRecord] = {}
        self._state: dict[str, _RunState] = {}
        self._idem: dict[tuple[str, str], tuple[str, str]] = {}
        self._jobs: deque[str] = deque()
        self._jobs_changed = asyncio.Event()
        self._leases: dict[str, str] = {}
        """run_id → the worker holding it."""
        self._alive: dict[str, float] = {}
        """worker → when its lease lapses unless it heartbeats."""
        self._next_lease_scan = 0.0
        self._expires: dict[str, float] = {}
        self._cancelled: set[str] = set()
        self._cancel_events: dict[str, asyncio.Event] = {}
        self.feeds = LiveFeeds()
        """SSE subscribers' taps, handed each event's frame at append (``app.delivery.tap``)."""

    async def start(self) -> None:
        """Nothing to connect."""

    async def close(self) -> None:
        """Nothing to release."""

    async def ping(self) -> bool:
        """Always reachable."""
        return True

    # -- runs --------------------------------------------------------------------------
    async def create_run(self, record: RunRecord, *, idempotency_key: str | None = None,
                         request_hash: str | None = None,
                         first_event: ServiceEvent | None = None) -> tuple[RunRecord, bool]:
        """See ``Backend.create_run``."""
        if idempotency_key is not None:
            seen = self._idem.get((record.tenant, idempotency_key))
            if seen is not None:
                if seen[0] != (request_hash or ""):
                    raise IdempotencyConflict(idempotency_key)
                first = await self.get_run(seen[1])
                if first is not None:
                    return first, False
            self._idem[(record.tenant, idempotency_key)] = (request_hash or "", record.id)
        state = self._state[record.id] = _RunState()
        if first_event is not None:
            record.last_seq = 1
            state.events.append((1, *first_event_body(record.id, first_event)))
        self._runs[record.id] = _copy(record)
        self._push_job(record.id)
        return _copy(record), True

    async def get_run(self, run_id: str) -> RunRecord | None:
        """See ``Backend.get_run``."""
        record = self._record(run_id)
        return _copy(record) if record is not None else None

    async def list_runs(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                        limit: int, cursor: str | None) -> RunPage:
        """See ``Backend.list_runs`` (cursor: ``<created_at>|<id>`` of the last run shown)."""
        runs = [r for r in list(self._runs.values()) if r.tenant == tenant
                and self._record(r.id) is not None]
        runs.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        after = parse_cursor(cursor)
        page: list[RunRecord] = []
        for r in runs:
            if after is not None and (r.created_at, r.id) >= after:
                continue
            if matches(r, status, metadata):
                page.append(_copy(r))
                if len(page) > limit:
                    break
        more = len(page) > limit
        page = page[:limit]
        return RunPage(runs=page, next_cursor=make_cursor(page[-1]) if more else None)

    async def update_run(self, run_id: str, attempt: int, **fields: Any) -> None:
        """See ``Backend.update_run``."""
        record = self._fenced(run_id, attempt)
        for key, value in fields.items():
            setattr(record, key, copy.deepcopy(value))

    async def expires_in(self, run_id: str) -> float | None:
        """Seconds until the run's data is dropped (None: kept while it runs)."""
        deadline = self._expires.get(run_id)
        return None if deadline is None else deadline - now()

    # -- checkpoints and events -------------------------------------------------------
    async def load_checkpoint(self, run_id: str) -> list[dict[str, Any]]:
        """See ``Backend.load_checkpoint``."""
        state = self._state.get(run_id)
        return [orjson.loads(m) for m in state.ckpt] if state else []

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """See ``Backend.append_events``."""
        return self.append_now(run_id, attempt, batch)

    def append_now(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """``append_events`` without the await: the run's sink writes from the loop's step
        (``app.worker.sink``)."""
        record = self._fenced(run_id, attempt) if attempt is not None else self._must(run_id)
        state = self._state[run_id]
        if batch.token is not None and batch.token == state.last_token:
            return record.last_seq
        if batch.events and record.status in TERMINAL:
            raise RunEnded(f"run {run_id} has ended: no event after agent_end")
        self._add_events(record, state, batch.events)
        state.ckpt.extend(batch.checkpoint)
        for kind, message_id in batch.acks:
            state.inflight[kind] = [q for q in state.inflight[kind] if q.id != message_id]
        for key, value in (batch.fields or {}).items():
            setattr(record, key, copy.deepcopy(value))
        state.last_token = batch.token
        return record.last_seq

    def _add_events(self, record: RunRecord, state: _RunState,
                    events: Sequence[tuple[str, bytes]]) -> None:
        first = len(state.events)
        for type_, body in events:
            record.last_seq += 1
            state.events.append((record.last_seq, type_, with_seq(record.last_seq, body)))
        if events:
            state.waiter.set()
            state.waiter = asyncio.Event()
            if self.feeds.watched(record.id):
                self.feeds.push(record.id, [StoredEvent(*e) for e in state.events[first:]])

    async def get_run_and_events(self, run_id: str, after: int, limit: int
                                 ) -> tuple[RunRecord | None, list[StoredEvent]]:
        """See ``Backend.get_run_and_events``."""
        return await self.get_run(run_id), await self.read_events(run_id, after, limit)

    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """See ``Backend.read_events`` (seq n sits at index n-1)."""
        state = self._state.get(run_id)
        if state is None or self._record(run_id) is None:
            return []
        return [StoredEvent(*e) for e in state.events[max(after, 0):max(after, 0) + limit]]

    async def wait_events(self, run_id: str, after: int, timeout: float) -> list[StoredEvent]:  # noqa: ASYNC109
        """See ``Backend.wait_events``."""
        events = await self.read_events(run_id, after)
        state = self._state.get(run_id)
        if events or state is None:
            return events
        try:
            async with asyncio.timeout(timeout):
                await state.waiter.wait()
        except TimeoutError:
            return []
        return await self.read_events(run_id, after)

    # -- queues -----------------------------------------------------------------------
    async def enqueue(self, run_id: str, kind: QueueKind, item: QueuedMessage) -> int:
        """See ``Backend.enqueue`` (no await inside: one step on the event loop)."""
        record, state = self._open(run_id)
        queue = state.queues[kind]
        queue.append(item)
        body = queue_event_body(run_id, "message_queued", item.id, kind)
        self._add_events(record, state, [("message_queued", body)])
        return len(queue)

    async def close_queues(self, run_id: str, attempt: int) -> bool:
        """See ``Backend.close_queues``."""
        self._fenced(run_id, attempt)
        state = self._state[run_id]
        if any(state.queues[kind] for kind in KINDS):
            return False
        state.closed = True
        return True

    def _open(self, run_id: str) -> tuple[RunRecord, _RunState]:
        """The run and its state if it still takes messages, else ``RunEnded``."""
        record = self._must(run_id)
        state = self._state[run_id]
        if state.closed or record.status in TERMINAL:
            raise RunEnded(f"run {run_id} has ended ({record.status})")
        return record, state

    async def list_queue(self, run_id: str) -> list[tuple[QueueKind, QueuedMessage]]:
        """See ``Backend.list_queue``."""
        state = self._state.get(run_id)
        if state is None:
            return []
        return [(kind, item) for kind in KINDS for item in state.queues[kind]]

    async def withdraw(self, run_id: str, message_id: str) -> QueueKind:
        """See ``Backend.withdraw``."""
        state = self._state.get(run_id)
        if state is None:
            raise RunNotFound(run_id)
        for kind in KINDS:
            for item in state.queues[kind]:
                if item.id == message_id:
                    record, _ = self._open(run_id)  # a run that ended keeps its queue as is
                    state.queues[kind].remove(item)
                    body = queue_event_body(run_id, "message_withdrawn", message_id, kind)
                    self._add_events(record, state, [("message_withdrawn", body)])
                    return kind
        if message_id in state.taken:
            raise QueueItemTaken(message_id)
        raise RunNotFound(message_id)

    async def take(self, run_id: str, kind: QueueKind, mode: QueueMode,
                   attempt: int | None = None, token: str | None = None
                   ) -> list[QueuedMessage]:
        """See ``Backend.take``."""
        if attempt is not None:
            self._fenced(run_id, attempt)
        state = self._state[run_id]
        last = state.took.get(kind)
        if token and last is not None and last[0] == token:
            return [q for q in state.inflight[kind] if q.id in last[1]]
        queue = state.queues[kind]
        count = len(queue) if mode == "all" else min(1, len(queue))
        taken = [queue.popleft() for _ in range(count)]
        state.inflight[kind].extend(taken)
        state.taken.update(q.id for q in taken)
        if token:
            state.took[kind] = (token, {q.id for q in taken})
        return taken

    async def ack(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``Backend.ack``."""
        await self.append_events(run_id, None, EventBatch(acks=[(kind, q.id) for q in items]))

    async def release(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``Backend.release``."""
        state = self._state.get(run_id)
        if state is None:
            return
        ids = {q.id for q in items}
        state.inflight[kind] = [q for q in state.inflight[kind] if q.id not in ids]
        state.queues[kind].extendleft(reversed(items))
        state.taken.difference_update(ids)

    async def queue_lengths(self, run_id: str) -> dict[str, int]:
        """See ``Backend.queue_lengths``."""
        state = self._state.get(run_id)
        return {k: len(state.queues[k]) if state else 0 for k in KINDS}

    # -- cancel -----------------------------------------------------------------------
    async def request_cancel(self, run_id: str) -> None:
        """See ``Backend.request_cancel``."""
        self._must(run_id)
        self._cancelled.add(run_id)
        self._cancel_event(run_id).set()

    async def cancel_requested(self, run_id: str) -> bool:
        """See ``Backend.cancel_requested``."""
        return run_id in self._cancelled

    async def wait_cancel(self, run_id: str) -> None:
        """See ``Backend.wait_cancel``."""
        await self._cancel_event(run_id).wait()

    # -- dispatch ---------------------------------------------------------------------
    async def claim(self, worker: str, timeout: float) -> Claim | None:  # noqa: ASYNC109
        """See ``Backend.claim``."""
        claims = await self.claim_many(worker, timeout, 1)
        return claims[0] if claims else None

    async def claim_many(self, worker: str, timeout: float,  # noqa: ASYNC109
                         count: int) -> list[Claim]:
        """See ``Backend.claim_many``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            claims: list[Claim] = []
            while len(claims) < count and (claim := self._claim_now(worker)) is not None:
                claims.append(claim)
            if claims or loop.time() >= deadline:
                return claims
            self._jobs_changed.clear()
            wait = min(deadline - loop.time(), 0.05 if self._leases else 1.0)
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    await self._jobs_changed.wait()
            except TimeoutError:
                pass

    async def heartbeat(self, worker: str) -> None:
        """See ``Backend.heartbeat``."""
        self._alive[worker] = now() + self.lease

    async def finish(self, run_id: str, attempt: int) -> None:
        """See ``Backend.finish``."""
        self._fenced(run_id, attempt)
        self._leases.pop(run_id, None)
        self._expires[run_id] = now() + self.run_ttl

    async def release_run(self, run_id: str, attempt: int) -> None:
        """See ``Backend.release_run``."""
        record = self._fenced(run_id, attempt)
        record.worker = None
        self._leases.pop(run_id, None)
        self._jobs.appendleft(run_id)
        self._jobs_changed.set()

    # -- helpers ----------------------------------------------------------------------
    def _push_job(self, run_id: str) -> None:
        self._jobs.append(run_id)
        self._jobs_changed.set()

    def _claim_now(self, worker: str) -> Claim | None:
        t = now()
        if t >= self._next_lease_scan:  # an O(runs) scan: not on every claim
            lapsed = next((r for r, w in self._leases.items()  # never its own: it is alive
                           if w != worker and self._alive.get(w, 0) < t), None)
            if lapsed is not None:
                return self._assign(lapsed, worker)
            self._next_lease_scan = t + min(0.25, self.lease / 4)
        while self._jobs:
            run_id = self._jobs.popleft()
            record = self._record(run_id)
            if record is not None and record.status not in TERMINAL:
                return self._assign(run_id, worker)
        return None

    def _assign(self, run_id: str, worker: str) -> Claim:
        record = self._runs[run_id]
        record.attempt += 1
        record.worker = worker
        self._leases[run_id] = worker
        self._alive[worker] = now() + self.lease  # a claim is a heartbeat
        state = self._state[run_id]
        for kind in KINDS:  # taken by the previous attempt, never injected: back to the head
            state.queues[kind].extendleft(reversed(state.inflight[kind]))
            state.taken.difference_update(q.id for q in state.inflight[kind])
            state.inflight[kind] = []
        return Claim(run_id=run_id, attempt=record.attempt, resumed=record.attempt > 1)

    def _record(self, run_id: str) -> RunRecord | None:
        deadline = self._expires.get(run_id)
        if deadline is not None and deadline < now():
            self._drop(run_id)
        return self._runs.get(run_id)

    def _drop(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        self._state.pop(run_id, None)
        self._expires.pop(run_id, None)
        self._cancelled.discard(run_id)
        self._cancel_events.pop(run_id, None)

    def _must(self, run_id: str) -> RunRecord:
        record = self._record(run_id)
        if record is None:
            raise RunNotFound(run_id)
        return record

    def _fenced(self, run_id: str, attempt: int) -> RunRecord:
        record = self._must(run_id)
        if record.attempt != attempt:
            raise FencedOut(f"run {run_id}: attempt {attempt} < {record.attempt}")
        return record

    def _cancel_event(self, run_id: str) -> asyncio.Event:
        event = self._cancel_events.get(run_id)
        if event is None:
            event = self._cancel_events[run_id] = asyncio.Event()
            if run_id in self._cancelled:
                event.set()
        return event


def matches(record: RunRecord, status: str | None, metadata: dict[str, str]) -> bool:
    """Whether a run passes ``list_runs`` filters."""
    if status is not None and record.status != status:
        return False
    return all(record.metadata.get(k) == v for k, v in metadata.items())


def make_cursor(record: RunRecord) -> str:
    """The opaque cursor after ``record``."""
    return f"{record.created_at!r}|{record.id}"


def parse_cursor(cursor: str | None) -> tuple[float, str] | None:
    """``make_cursor`` reversed (None: from the newest)."""
    if not cursor:
        return None
    created, _, run_id = cursor.partition("|")
    try:
        return float(created), run_id
    except ValueError:
        return None


def _copy(record: RunRecord) -> RunRecord:
    """A copy callers may change freely. ``request`` is shared: it is never changed after the
    run is created (a deep copy of it was most of the cost of every read)."""
    return replace(record, usage=dict(record.usage), metadata=dict(record.metadata),
                   loaded_tools=list(record.loaded_tools))
