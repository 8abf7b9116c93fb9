"""The records the store keeps and hands out: runs, log events, claims, write batches, parked
state, and the byte forms shared by both backends (an event's stored JSON, a queue entry).

Hash values and bodies are JSON-ready data and bytes: the store knows neither HTTP nor the loop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import orjson

from app.engine.events import (
    ApprovalDecided,
    MessageQueued,
    MessageWithdrawn,
    ServiceEvent,
    encode_event_body,
    utc_now,
)
from app.engine.queues import QueuedMessage, QueueKind
from providers.messages import UserMessage, message_adapter

RunStatus: TypeAlias = Literal["queued", "running", "requires_action", "completed", "failed",
                              "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

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
    output: Any = None
    """The final answer parsed, for a run with a response format that ended ``stop``."""
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
    owner: str | None = None
    """The end user (subject) whose run this is; None: the tenant's own (an API key's)."""
    state: dict[str, Any] | None = None
    """The shared state the run ended with (``app.engine.shared_state``): where its thread's
    next run starts."""
    traceparent: str | None = None
    """W3C trace context every attempt's ``invoke_agent`` span is a child of: the request's
    ``traceparent``, else the first attempt's own span (``app.telemetry.traces``), so a resumed
    or woken run continues one trace."""
    replaced_by: str | None = None
    """A thread's reply another run replaced (a regenerated answer: ``ThreadPost.replaces``);
    its messages left the thread's history."""
    cancel_requested: bool = False
    """Cancel was asked for when the record was read (the store keeps the flag itself:
    ``CancelSignal``; never written through the record)."""


@dataclass(slots=True, frozen=True)
class StoredEvent:
    """One event of a run's log: ``data`` is the exact JSON sent as SSE ``data:``."""

    seq: int
    type: str
    data: bytes


@dataclass(slots=True, frozen=True)
class Claim:
    """A run handed to a worker: ``attempt`` fences its writes; ``resumed`` after a crash;
    ``record`` the run as the claim found it, when the store read it in the same step (the
    worker then needs no read of its own)."""

    run_id: str
    attempt: int
    resumed: bool
    record: RunRecord | None = None


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

@dataclass(slots=True, kw_only=True)
class ParkedState:
    """What a parked (or just woken) run waits for: ``calls`` in the model's order (JSON of
    ``app.engine.approvals.WaitingCall``), ``decisions`` by tool_call_id, the approval
    ``deadline`` (epoch s) and whether it ``expired``."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    deadline: float | None = None
    expired: bool = False
    parked_at: float = 0.0
    """When it parked (epoch s): the wait does not count against the run's own deadline."""
    carried: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Answers given before this parking that the woken run still needs (a nested loop's
    park: the turn of the call running it is finished again); not part of ``calls``."""

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



@dataclass(slots=True, frozen=True)
class AgentRecord:
    """One version of a tenant's agent: its definition (JSON-ready), numbered from 1."""

    name: str
    version: int
    definition: dict[str, Any]
    created_at: float


REQUIRES_ACTION: Literal["requires_action"] = "requires_action"
"""The status of a parked run (it waits for people: approvals or client tool results)."""


@dataclass(slots=True, frozen=True)
class Answer:
    """One answer to a parked run's pick (``ParkingStore.decide``): the decision as stored
    and its ``approval_decided`` event."""

    tool_call_id: str
    decision: dict[str, Any]
    event: ApprovalDecided


def service_event_batch(run_id: str, event: ServiceEvent) -> EventBatch:
    """The batch that appends one service event (``Backend.append_service_event``)."""
    return EventBatch(events=[(event.type, encode_event_body(event, run_id=run_id,
                                                              ts=utc_now()))])
