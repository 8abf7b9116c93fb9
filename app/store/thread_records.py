"""Thread records and the outcome of posting a message to a thread.

Posting is one atomic backend step (``ThreadStore.post_thread_run``)::

    thread idle ─────────────────────────▶ started      a new run (the post's input as its prompts)
    thread busy ─ reject ────────────────▶ rejected     409 thread_busy, nothing stored
                ─ enqueue ───────────────▶ queued       a follow-up of the active run
                ─ steer ─────────────────▶ steered      a steering message of the active run
                ─ interrupt ─────────────▶ interrupted  active run cancelled; a new run waits
                                                        for it to end, then starts
    a run waits already (interrupt) ─────▶ queued into that waiting run's input

When the active run ends, ``settle_thread`` appends what it added to the history, and messages
it never took (queued follow-ups and steers, the waiting run's input) start the next run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from app.engine.events import RunCreated
from app.store.records import RunRecord

Multitask: TypeAlias = Literal["reject", "enqueue", "steer", "interrupt"]
Action: TypeAlias = Literal["started", "queued", "steered", "interrupted", "rejected"]
ThreadStatus: TypeAlias = Literal["idle", "busy"]
DEFAULT_MULTITASK: Multitask = "enqueue"


@dataclass(slots=True, kw_only=True)
class ThreadRecord:
    """A thread as stored. ``runs``: every run of the thread in order of creation (the order
    they run in); ``active_run`` the one running now, ``next_run`` one waiting for it to end
    (an ``interrupt``)."""

    id: str
    tenant: str
    created_at: float = 0.0
    updated_at: float = 0.0
    metadata: dict[str, str] = field(default_factory=dict)
    owner: str | None = None
    """The end user (subject) whose thread this is (its runs are theirs too); None: the
    tenant's own."""
    active_run: str | None = None
    next_run: str | None = None
    runs: list[str] = field(default_factory=list)

    @property
    def status(self) -> ThreadStatus:
        """``busy`` while a run is active."""
        return "busy" if self.active_run else "idle"


@dataclass(slots=True, kw_only=True)
class ThreadPost:
    """One message (or several) posted to a thread. ``candidate`` is the run to create if the
    thread is idle (or the post interrupts); ``prompts`` the user messages (JSON), one queue
    entry each under ``message_ids`` when they join the active run's queue."""

    tenant: str
    multitask: Multitask
    candidate: RunRecord
    first_event: RunCreated
    prompts: list[bytes]
    message_ids: list[str]
    idempotency_key: str | None = None
    request_hash: str = ""
    owner: str | None = None
    """The end user posting: a thread of another owner is not found. None: the tenant's key
    (any thread of the tenant)."""
    create: ThreadRecord | None = None
    """Create the thread (this record) first when it does not exist, in the same step: a
    toolkit's first message of a chat (``app.dialects.conversation``)."""
    replaces: str | None = None
    """Regenerate: this run, the thread's last, ended, is replaced by the candidate in the
    same step: its messages leave the history, it gets ``replaced_by`` (``NotLastReply``
    when it is not the last run; ``rejected`` while the thread is busy)."""
    queue_limit: int | None = None
    """The most messages a run may hold waiting: prompts that would take the active run's
    queues (or the waiting run's input) past it raise ``QueueFull`` and nothing changes.
    None: no limit."""


@dataclass(slots=True, kw_only=True)
class PostOutcome:
    """What happened to a post: ``run_id`` is the run that carries the message (for
    ``rejected``, the active run); ``queued`` whether it joined that run's queue or input
    rather than being its first prompt; ``repeat`` an ``Idempotency-Key`` replay."""

    action: Action
    run_id: str
    queued: bool
    message_ids: list[str]
    in_queue: bool = False
    """The messages joined the run's steering/follow-up queue (``message_queued`` events;
    withdrawable) rather than the input of a run that has not started."""
    repeat: bool = False

    def encode(self, request_hash: str) -> str:
        """As stored under an idempotency key."""
        flags = ("1" if self.queued else "0") + ("1" if self.in_queue else "0")
        return "|".join([request_hash, self.action, self.run_id, flags,
                         ",".join(self.message_ids)])

    @classmethod
    def decode(cls, raw: str) -> tuple[str, PostOutcome]:
        """``(request hash, outcome)`` of a stored outcome (``repeat`` set)."""
        digest, action, run_id, flags, ids = raw.split("|")
        outcome = cls(action=action, run_id=run_id, queued=flags[:1] == "1",  # type: ignore[arg-type]
                      in_queue=flags[1:2] == "1",
                      message_ids=[i for i in ids.split(",") if i], repeat=True)
        return digest, outcome


@dataclass(slots=True)
class ThreadPage:
    """One page of ``list_threads``; ``next_cursor`` is None on the last page."""

    threads: list[ThreadRecord]
    next_cursor: str | None


def successor(ended: RunRecord, run_id: str, now: float) -> RunRecord:
    """The run that carries messages an ended run never took: its options, a fresh id."""
    return RunRecord(id=run_id, tenant=ended.tenant, model=ended.model, created_at=now,
                     metadata=dict(ended.metadata), request={**ended.request, "input": []},
                     last_seq=1, owner=ended.owner)
