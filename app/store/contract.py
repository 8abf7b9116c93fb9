"""The one small protocol both backends (``memory``, ``redis``) implement.

Runs, the per-run event log, the steering/follow-up queues, the cancel signal and job dispatch.
Backends know neither HTTP nor the loop: they store JSON-ready data and bytes. Every write made
on behalf of a running loop carries the run's ``attempt`` number and is refused with
``FencedOut`` once another worker has claimed the run (a higher attempt), so a worker paused
past its lease can never write into a run it lost.

Exceptions::

    BackendError              the store is unreachable or failed (HTTP: 503 + Retry-After)
    ├── FencedOut             this worker's attempt is stale: stop driving the run
    ├── IdempotencyConflict   same Idempotency-Key, different body (HTTP: 409)
    ├── RunNotFound           no such run for this tenant (HTTP: 404)
    ├── QueueItemTaken        withdraw of a message the loop already took (HTTP: 409)
    └── RunEnded              the run has ended or is ending: no message, no event (HTTP: 409)

A run's end is atomic with its queues (issue 9)::

    loop: queues empty ─ close_queues ✓ (refuses if a message is waiting) ─ agent_end + status
    API:  enqueue + message_queued, one step, refused (RunEnded) once the queues are closed
          or the status is terminal

so every accepted message is taken by the loop (a close that finds one waiting fails and the
loop takes it instead of ending), and the log takes no event after ``agent_end``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

import orjson

from app.engine.events import (
    MessageQueued,
    MessageWithdrawn,
    ServiceEvent,
    encode_event_body,
    utc_now,
)
from app.engine.queues import QueuedMessage, QueueKind, QueueMode
from app.store.parking import ParkingStore
from providers.messages import UserMessage, message_adapter

RunStatus: TypeAlias = Literal["queued", "running", "requires_action", "completed", "failed",
                              "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


class BackendError(Exception):
    """The store failed or cannot be reached."""


class FencedOut(BackendError):
    """The run was claimed by another worker (its attempt is newer than ours)."""


class IdempotencyConflict(BackendError):
    """An ``Idempotency-Key`` was reused with a different request body."""


class RunNotFound(BackendError):
    """No such run (or not this tenant's)."""


class QueueItemTaken(BackendError):
    """The queued message was already taken by the loop."""


class RunEnded(BackendError):
    """The run has ended (terminal status) or its queues are closed because it is ending."""


@dataclass(slots=True, kw_only=True)
class RunRecord:
    """A run as stored. ``request`` is the validated create body (JSON-ready)."""

    id: str
    tenant: str
    status: RunStatus = "queued"
    model: str = ""
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    stop_reason: str | None = None
    error: str | None = None
    result: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    request: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    """Incremented each time a worker claims the run; fences every write."""
    worker: str | None = None
    last_seq: int = 0
    """The seq of the last event written (the next event gets ``last_seq + 1``)."""
    loaded_tools: list[str] = field(default_factory=list)
    """Deferred tools the run loaded (``tool_search``): on its menu again when it resumes."""
    parked_seconds: float = 0.0
    """Time spent waiting for people (``requires_action``): added to the run's deadline."""
    progress_mark: int = 0
    """Checkpointed messages when the live attempt started (-1: no attempt is live, the last
    one handed the run back). A resume that finds it unchanged knows the worker died without
    progress (``app.worker.attempts``)."""
    lost_attempts: int = 0
    """Consecutive attempts whose worker died without progress (``AGENTLOOP_MAX_ATTEMPTS``)."""


@dataclass(slots=True, frozen=True)
class StoredEvent:
    """One event of a run's log: ``data`` is the exact JSON sent as SSE ``data:``."""

    seq: int
    type: str
    data: bytes


@dataclass(slots=True, frozen=True)
class Claim:
    """A run handed to a worker: ``attempt`` fences its writes; ``resumed`` after a crash."""

    run_id: str
    attempt: int
    resumed: bool


@dataclass(slots=True, kw_only=True)
class EventBatch:
    """One atomic write to a run's log (``append_events``).

    ``events`` are ``(type, body)`` where ``body`` is the event's JSON object *without* ``seq``
    (``app.engine.events.encode_event_body``); the backend allocates the seqs and stores
    ``{"seq":N,`` + body. ``checkpoint`` messages (JSON bytes) are appended to the run's
    checkpoint and ``acks`` drop injected queue messages from the in-flight lists in the same
    transaction, so after a crash the log, the checkpoint and the queues never disagree.
    ``fields`` are set on the run record too (the final status beside ``agent_end``). A batch
    with events for a run whose status is already terminal is refused (``RunEnded``): nothing
    follows ``agent_end``.
    ``token`` makes a retried write idempotent: a batch whose token equals the last applied one
    is not applied twice (its reply was lost, e.g. Redis restarted).
    """

    events: Sequence[tuple[str, bytes]] = ()
    checkpoint: Sequence[bytes] = ()
    acks: Sequence[tuple[QueueKind, str]] = ()
    fields: dict[str, Any] | None = None
    token: str | None = None


def with_seq(seq: int, body: bytes) -> bytes:
    """The stored event: ``body`` (a JSON object) with ``seq`` spliced in first."""
    return b'{"seq":%d,%s' % (seq, body[1:])


def queue_entry(item: QueuedMessage) -> bytes:
    """A queued message as stored: ``<id>\t<json>`` (the id prefix lets scripts match it)."""
    return item.id.encode() + b"\t" + orjson.dumps(item.message)


def parse_queue_entry(raw: bytes) -> QueuedMessage:
    """The inverse of ``queue_entry``."""
    head, _, body = raw.partition(b"\t")
    message = message_adapter.validate_json(body)
    assert isinstance(message, UserMessage)
    return QueuedMessage(id=head.decode(), message=message)


@dataclass(slots=True)
class RunPage:
    """One page of ``list_runs``; ``next_cursor`` is None on the last page."""

    runs: list[RunRecord]
    next_cursor: str | None


class Backend(ParkingStore, Protocol):
    """Storage and coordination for runs. All methods may raise ``BackendError``. Parked runs
    (``requires_action``): ``parking_base.ParkingStore``."""

    name: str

    async def start(self) -> None:
        """Connect / prepare (called from the app lifespan)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    async def ping(self) -> bool:
        """Whether the store answers now (``/readyz``)."""
        ...

    # -- runs --------------------------------------------------------------------------
    async def create_run(self, record: RunRecord, *, idempotency_key: str | None = None,
                         request_hash: str | None = None,
                         first_event: ServiceEvent | None = None) -> tuple[RunRecord, bool]:
        """Store a new run and dispatch it; ``(record, created)``. ``first_event`` becomes
        seq 1 of its log, written before the run can be claimed. A repeated idempotency key
        with the same hash returns the first run (``created`` False); another hash raises
        ``IdempotencyConflict``."""
        ...

    async def get_run(self, run_id: str) -> RunRecord | None:
        """The run, or None."""
        ...

    async def list_runs(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                        limit: int, cursor: str | None) -> RunPage:
        """The tenant's runs, newest first, filtered, paginated by an opaque cursor."""
        ...

    async def update_run(self, run_id: str, attempt: int, **fields: Any) -> None:
        """Set fields of a run on behalf of the worker holding ``attempt`` (fenced)."""
        ...

    # -- checkpoints and events -------------------------------------------------------
    async def load_checkpoint(self, run_id: str) -> list[dict[str, Any]]:
        """The messages the run added so far, as checkpointed (empty when none)."""
        ...

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """Apply ``batch`` atomically; returns the run's last seq. ``attempt`` fences it (None:
        a service event written by the API, not fenced)."""
        ...

    async def append_service_event(self, run_id: str, event: ServiceEvent) -> int:
        """Append one service event (``message_queued``, ``message_withdrawn``) to the run's
        log; returns its seq. Used by the API beside the worker's own writes."""
        ...

    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """Events with ``seq > after``, oldest first, at most ``limit``."""
        ...

    async def get_run_and_events(self, run_id: str, after: int, limit: int
                                 ) -> tuple[RunRecord | None, list[StoredEvent]]:
        """``get_run`` and ``read_events`` in one store round trip (a stream's first page)."""
        ...

    async def wait_events(self, run_id: str, after: int, timeout: float) -> list[StoredEvent]:  # noqa: ASYNC109
        """Like ``read_events`` but waits up to ``timeout`` s for at least one event."""
        ...

    # -- queues -----------------------------------------------------------------------
    async def enqueue(self, run_id: str, kind: QueueKind, item: QueuedMessage) -> int:
        """Queue a message and write its ``message_queued`` event, in one atomic step; returns
        its 1-based position. ``RunEnded`` once the queues are closed or the run ended."""
        ...

    async def close_queues(self, run_id: str, attempt: int) -> bool:
        """The loop is about to end: refuse every later ``enqueue``, atomically, unless a
        message is waiting (False: the loop takes it and goes on). Fenced."""
        ...

    async def list_queue(self, run_id: str) -> list[tuple[QueueKind, QueuedMessage]]:
        """Messages still waiting (not taken), steering first, oldest first."""
        ...

    async def withdraw(self, run_id: str, message_id: str) -> QueueKind:
        """Remove a waiting message and write its ``message_withdrawn`` event, in one atomic
        step; ``QueueItemTaken`` if the loop took it, ``RunNotFound`` if there is no such
        message, ``RunEnded`` once the run has ended."""
        ...

    async def take(self, run_id: str, kind: QueueKind, mode: QueueMode,
                   attempt: int | None = None, token: str | None = None
                   ) -> list[QueuedMessage]:
        """Move the oldest (or all) waiting messages to the in-flight list atomically (fenced
        when ``attempt`` is given). A call repeated with the ``token`` of the queue's last take
        answers what that take moved (still in flight) and takes nothing more: a retried call
        whose first reply was lost must not strand those messages in flight."""
        ...

    async def ack(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """Drop injected messages from the in-flight list (the runner acks through
        ``EventBatch.acks`` instead, atomically with the checkpoint)."""
        ...

    async def release(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """Return in-flight messages to the head of the queue, in order."""
        ...

    async def queue_lengths(self, run_id: str) -> dict[str, int]:
        """``{"steer": n, "follow_up": n}`` of waiting messages."""
        ...

    # -- cancel -----------------------------------------------------------------------
    async def request_cancel(self, run_id: str) -> None:
        """Ask the worker running the run to abort it (idempotent)."""
        ...

    async def cancel_requested(self, run_id: str) -> bool:
        """Whether cancel was asked for."""
        ...

    async def wait_cancel(self, run_id: str) -> None:
        """Return once cancel is asked for (the worker awaits this beside the loop)."""
        ...

    # -- dispatch ---------------------------------------------------------------------
    async def claim(self, worker: str, timeout: float) -> Claim | None:  # noqa: ASYNC109
        """The next queued run for this worker, or a run whose worker stopped heartbeating;
        None after ``timeout`` s with nothing to do. A run already waiting is taken whatever
        the timeout (0 included: a look without waiting)."""
        ...

    async def claim_many(self, worker: str, timeout: float,  # noqa: ASYNC109
                         count: int) -> list[Claim]:
        """Like ``claim`` but up to ``count`` runs at once (empty after ``timeout`` s): one
        store round trip for a burst of new runs instead of one per run."""
        ...

    async def heartbeat(self, worker: str) -> None:
        """This worker is alive: the runs it holds stay its own for another lease. One write
        per worker whatever the number of runs (claiming runs counts as one too); runs another
        worker has claimed meanwhile stay with that worker."""
        ...

    async def finish(self, run_id: str, attempt: int) -> None:
        """The run ended: acknowledge its job and start its retention timer."""
        ...

    async def release_run(self, run_id: str, attempt: int) -> None:
        """Hand a running run back (graceful shutdown) so another worker resumes it."""
        ...


class ServiceEvents:
    """Mixin: ``append_service_event`` in terms of ``append_events`` (both backends)."""

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        raise NotImplementedError

    async def append_service_event(self, run_id: str, event: ServiceEvent) -> int:
        """See ``Backend.append_service_event``."""
        body = encode_event_body(event, run_id=run_id, ts=utc_now())
        return await self.append_events(run_id, None, EventBatch(events=[(event.type, body)]))


def queue_event_body(run_id: str, type_: str, message_id: str, kind: QueueKind) -> bytes:
    """The body (no seq) of a ``message_queued`` / ``message_withdrawn`` event."""
    event: ServiceEvent = (MessageQueued(message_id=message_id, kind=kind)
                           if type_ == "message_queued"
                           else MessageWithdrawn(message_id=message_id, kind=kind))
    return encode_event_body(event, run_id=run_id, ts=utc_now())


def first_event_body(run_id: str, event: ServiceEvent) -> tuple[str, bytes]:
    """``(type, stored JSON)`` of a run's seq-1 event."""
    return event.type, with_seq(1, encode_event_body(event, run_id=run_id, ts=utc_now()))


def now() -> float:
    """Wall-clock seconds (one place, so tests could pin it)."""
    return time.time()
