"""The state of the in-process backend and the steps its parts share (``MemoryBackend`` is
``MemoryRuns``, ``MemoryQueues``, ``MemoryParking`` and ``MemoryThreads`` over this base).

One event loop runs everything: a method that does not ``await`` between its checks and its
changes is one atomic step, as a Lua script is on Redis. Waiters are ``asyncio.Event``s
replaced on every wake.
"""

from __future__ import annotations

import asyncio
import copy
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import fields as dataclass_fields
from typing import Any

from app.engine.events import ServiceEvent, encode_event_body, utc_now
from app.engine.queues import QueuedMessage, QueueKind
from app.store.errors import FencedOut, RunNotFound
from app.store.live_feed import LiveFeeds
from app.store.records import (
    REQUIRES_ACTION,
    AgentRecord,
    ParkedState,
    RunRecord,
    StoredEvent,
    now,
    with_seq,
)
from app.store.thread_records import ThreadRecord
from app.store.threads import DEFAULT_THREAD_TTL

KINDS: tuple[QueueKind, QueueKind] = ("steer", "follow_up")


class RunState:
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
        """Per queue, the token of the last ``take`` and the ids it took (QueueStore.take)."""
        self.last_token: str | None = None
        self.closed = False
        """The loop is ending: ``enqueue`` refuses (``close_queues``)."""
        self.waiter: asyncio.Event | None = None
        """What ``wait_events`` waits on, made when one waits (live subscribers are fed by
        their taps, so most appends find nobody waiting: no event made and dropped per
        append)."""

    def readers_event(self) -> asyncio.Event:
        """The event the next ``wake_readers`` sets."""
        if self.waiter is None:
            self.waiter = asyncio.Event()
        return self.waiter

    def wake_readers(self) -> None:
        """Wake every ``wait_events`` of the run: new events, or it parked (``p:`` note)."""
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            waiter.set()


class ThreadState:
    """Everything stored for one thread."""

    __slots__ = ("changed", "expires", "idem", "inputs", "msgs", "record")

    def __init__(self, record: ThreadRecord) -> None:
        self.record = record
        self.msgs: list[bytes] = []
        self.inputs: dict[str, list[bytes]] = {}
        self.idem: dict[str, str] = {}
        self.expires: float | None = None
        self.changed = asyncio.Event()

    def wake(self) -> None:
        """Wake everyone waiting for the thread to change."""
        self.changed.set()
        self.changed = asyncio.Event()


class MemoryCore:
    """Runs, logs, queues, dispatch, parkings and threads in dicts. ``lease``: seconds a claim
    lasts without a heartbeat; ``run_ttl``: seconds a finished run is kept."""

    name = "memory"

    def __init__(self, *, lease: float = 5.0, run_ttl: float = 7 * 86400.0) -> None:
        self.lease = lease
        self.run_ttl = run_ttl
        self.thread_ttl = DEFAULT_THREAD_TTL
        self._runs: dict[str, RunRecord] = {}
        self._state: dict[str, RunState] = {}
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
        self._parked: dict[str, ParkedState] = {}
        self._threads: dict[str, ThreadState] = {}
        self._counters: dict[str, tuple[float, int]] = {}
        self._agents: dict[tuple[str, str], list[AgentRecord]] = {}
        self._q_active: dict[tuple[str, str | None], dict[str, float]] = {}
        """(tenant, subject or None) → its active runs and when each was admitted."""
        self._q_rate: dict[tuple[str, str | None], dict[str, float]] = {}
        self._q_usage: dict[tuple[str, str], dict[tuple[str, str, str], int]] = {}
        """(tenant, day) → (dimension, value, metric) → count."""
        self._q_accrued: dict[str, set[tuple[str, str]]] = {}
        """day → (tenant, run_id) counted that day (the last two days kept, as on Redis)."""
        self._webhooks: dict[str, dict[str, bytes]] = {}
        """run_id → its webhook deliveries (encoded), by id."""
        self._webhooks_due: dict[tuple[str, str], float] = {}
        """(tenant, name) → the agent's versions, oldest first."""
        """key → (when its window ends, hits in it)."""
        self.feeds = LiveFeeds()
        """SSE subscribers' taps, handed each event's frame at append (``app.delivery.tap``)."""

    # -- records ------------------------------------------------------------------------
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
        self._parked.pop(run_id, None)
        self._webhooks.pop(run_id, None)  # its outbox goes with it, as on Redis

    def _must(self, run_id: str) -> RunRecord:
        record = self._record(run_id)
        if record is None:
            raise RunNotFound(run_id)
        return record

    def _fenced(self, run_id: str, attempt: int) -> RunRecord:
        record = self._record(run_id)  # ``_must`` without its call: every event batch comes here
        if record is None:
            raise RunNotFound(run_id)
        if record.attempt != attempt:
            raise FencedOut(f"run {run_id}: attempt {attempt} < {record.attempt}")
        return record

    # -- the log ------------------------------------------------------------------------
    def _add_events(self, record: RunRecord, state: RunState,
                    events: Sequence[tuple[str, bytes]]) -> None:
        """Append ``(type, body)`` events (seqs allocated here), wake readers, feed taps."""
        first = len(state.events)
        for type_, body in events:
            record.last_seq += 1
            state.events.append((record.last_seq, type_, with_seq(record.last_seq, body)))
        if events:
            state.wake_readers()
            if self.feeds.watched(record.id):
                self.feeds.push(record.id, [StoredEvent(*e) for e in state.events[first:]])

    def _log(self, run_id: str, event: ServiceEvent) -> None:
        """Append a service event to the run's log in the caller's step."""
        body = encode_event_body(event, run_id=run_id, ts=utc_now())
        self._add_events(self._runs[run_id], self._state[run_id], [(event.type, body)])

    # -- dispatch and control -----------------------------------------------------------
    def _push_job(self, run_id: str) -> None:
        self._jobs.append(run_id)
        self._jobs_changed.set()

    def _dispatch(self, run_id: str) -> None:
        """Queued again, for any worker (a woken parked run)."""
        self._runs[run_id].status = "queued"
        self._push_job(run_id)

    def _wake_parked(self, run_id: str) -> bool:
        """Dispatch the run if it is parked (a cancel or steer reached it); whether it was."""
        record = self._record(run_id)
        if record is None or record.status != REQUIRES_ACTION:
            return False
        self._dispatch(run_id)
        return True

    def _cancel_run(self, run_id: str) -> None:
        """Flag the run cancelled, tell its worker, and wake it if it is parked."""
        self._cancelled.add(run_id)
        self._cancel_event(run_id).set()
        self._wake_parked(run_id)

    def _cancel_event(self, run_id: str) -> asyncio.Event:
        event = self._cancel_events.get(run_id)
        if event is None:
            event = self._cancel_events[run_id] = asyncio.Event()
            if run_id in self._cancelled:
                event.set()
        return event

    # -- threads ------------------------------------------------------------------------
    def _thread(self, thread_id: str) -> ThreadState | None:
        thread = self._threads.get(thread_id)
        if thread is not None and thread.expires is not None and thread.expires < now():
            del self._threads[thread_id]
            return None
        return thread


def _compile_copy_run() -> Callable[[RunRecord], RunRecord]:
    """``copy_run``, written out field by field from ``RunRecord``'s fields (as dataclasses
    writes ``__init__``): every read and write of a run on this backend copies it, and
    ``dataclasses.replace`` walks the fields and builds keyword arguments on every call
    (5.3 against 0.7 µs per copy, timeit; two copies are ~5 % of ``POST /runs``)."""
    fresh = {"usage": "dict", "metadata": "dict", "loaded_tools": "list"}
    lines = ["def copy_run(record):", "    new = _new(RunRecord)"]
    for f in dataclass_fields(RunRecord):
        value = f"record.{f.name}"
        lines.append(f"    new.{f.name} = {fresh[f.name]}({value})" if f.name in fresh
                     else f"    new.{f.name} = {value}")
    lines.append("    return new")
    namespace: dict[str, Any] = {"_new": object.__new__, "RunRecord": RunRecord}
    exec("\n".join(lines), namespace)  # source built above from field names
    made: Callable[[RunRecord], RunRecord] = namespace["copy_run"]
    made.__doc__ = """A copy callers may change freely: its ``usage``, ``metadata`` and
    ``loaded_tools`` are its own. ``request`` is shared: it is never changed after the run is
    created (a deep copy of it was most of the cost of every read)."""
    return made


copy_run = _compile_copy_run()


def set_fields(record: RunRecord, fields: dict[str, object]) -> None:
    """Set stored fields on ``record`` (copies: the caller keeps its values)."""
    for key, value in fields.items():
        setattr(record, key, copy.deepcopy(value))


def copy_thread(record: ThreadRecord) -> ThreadRecord:
    """A copy callers may change freely."""
    return ThreadRecord(id=record.id, tenant=record.tenant, created_at=record.created_at,
                        updated_at=record.updated_at, metadata=dict(record.metadata),
                        owner=record.owner, active_run=record.active_run,
                        next_run=record.next_run, runs=list(record.runs))
