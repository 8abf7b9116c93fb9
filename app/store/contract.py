"""The storage contract: small protocols, one per concern, that both backends (``memory``,
``redis``) implement; ``Backend`` is all of them.

Runs, the per-run event log, the steering/follow-up queues, the cancel signal, job dispatch,
parked runs and threads. Backends know neither HTTP nor the loop: they store JSON-ready data
and bytes (``app.store.records``) and raise ``app.store.errors``. Every write made on behalf of
a running loop carries the run's ``attempt`` number and is refused with ``FencedOut`` once
another worker has claimed the run (a higher attempt), so a worker paused past its lease can
never write into a run it lost.

A run's end is atomic with its queues::

    loop: queues empty ─ close_queues ✓ (refuses if a message is waiting) ─ agent_end + status
    API:  enqueue + message_queued, one step, refused (RunEnded) once the queues are closed
          or the status is terminal

so every accepted message is taken by the loop (a close that finds one waiting fails and the
loop takes it instead of ending), and the log takes no event after ``agent_end``.

A run whose picks wait for a person is *parked*: status ``requires_action``, no worker, no
job, no lease. Whatever stops or redirects a run wakes a parked one in the same atomic step
(status ``queued``, dispatched again, so any worker continues it from its checkpoint)::

    park ─▶ requires_action ─┬─ decide (not the last answer) ─▶ requires_action (answers kept)
                             ├─ decide (the last answers) ────▶ queued ─▶ a worker continues
                             ├─ request_cancel, enqueue(steer),
                             │  a thread's interrupt or steer,
                             │  delete_thread ────────────────▶ queued ─▶ (decide now: 409)
                             └─ expire_due ───────────────────▶ queued, expired ─▶ denied
    park while a steer waits or cancel was asked ─▶ queued at once (never parked)

A follow-up does not wake a parked run: it waits for the loop's end, like any follow-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from app.engine.events import ServiceEvent
from app.engine.queues import QueuedMessage, QueueKind, QueueMode
from app.store.quota_records import Dimension, QuotaScope, Refusal, UsageLine
from app.store.records import (
    AgentRecord,
    Answer,
    Claim,
    EventBatch,
    ParkedState,
    RunPage,
    RunRecord,
    StoredEvent,
)
from app.store.thread_records import PostOutcome, ThreadPage, ThreadPost, ThreadRecord
from app.store.webhook_records import WebhookDelivery


class RunStore(Protocol):
    """Runs as records. All methods may raise ``BackendError``."""

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
                        limit: int, cursor: str | None, owner: str | None = None) -> RunPage:
        """The tenant's runs (``owner``: an end user's only), newest first, filtered,
        paginated by an opaque cursor."""
        ...

    async def update_run(self, run_id: str, attempt: int, **fields: Any) -> None:
        """Set fields of a run on behalf of the worker holding ``attempt`` (fenced)."""
        ...


class EventLog(Protocol):
    """A run's event log and its checkpoint."""

    async def load_checkpoint(self, run_id: str) -> list[dict[str, Any]]:
        """The messages the run added so far, as checkpointed (empty when none)."""
        ...

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """Apply ``batch`` atomically; returns the run's last seq. ``attempt`` fences it (None:
        a service event written by the API, not fenced)."""
        ...

    async def append_service_event(self, run_id: str, event: ServiceEvent) -> int:
        """Append one service event to the run's log; returns its seq."""
        ...

    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """Events with ``seq > after``, oldest first, at most ``limit``."""
        ...

    async def get_run_and_events(self, run_id: str, after: int, limit: int
                                 ) -> tuple[RunRecord | None, list[StoredEvent]]:
        """``get_run`` and ``read_events`` in one store round trip (a stream's first page)."""
        ...

    async def wait_events(self, run_id: str, after: int, timeout: float, *,  # noqa: ASYNC109
                          parked: bool = False) -> list[StoredEvent]:
        """Like ``read_events`` but waits up to ``timeout`` s for at least one event; with
        ``parked``, also returns ``[]`` as soon as the run is parked (``requires_action``: at
        once if it is, else when it parks: a park wakes the run's readers)."""
        ...


class QueueStore(Protocol):
    """The steering and follow-up queues of a run."""

    async def enqueue(self, run_id: str, kind: QueueKind, item: QueuedMessage, *,
                      limit: int | None = None) -> int:
        """Queue a message and write its ``message_queued`` event, in one atomic step; returns
        its 1-based position. A steer wakes the run if it is parked, in the same step.
        ``RunEnded`` once the queues are closed or the run ended; ``QueueFull`` when both
        queues together already hold ``limit`` messages (None: no limit)."""
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


class CancelSignal(Protocol):
    """Asking a run to stop."""

    async def request_cancel(self, run_id: str) -> None:
        """Ask the worker running the run to abort it (idempotent); a parked run is woken in
        the same step so a worker ends it; a queued one ends at its start."""
        ...

    async def cancel_requested(self, run_id: str) -> bool:
        """Whether cancel was asked for."""
        ...

    async def wait_cancel(self, run_id: str) -> None:
        """Return once cancel is asked for (the worker awaits this beside the loop)."""
        ...


class Dispatch(Protocol):
    """Handing runs to workers: jobs, leases, heartbeats."""

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

    async def redispatch_stranded(self) -> list[str]:
        """Dispatch the runs a process left ``queued`` without a job (it died between the
        step that queued the run and the job's write, where those are two writes: a Redis
        Cluster); their ids. Every worker calls it now and then; a run dispatched twice is
        claimed once."""
        ...


class ParkingStore(Protocol):
    """Parked runs (see the module docstring)."""

    async def park(self, run_id: str, attempt: int, calls: list[dict[str, Any]],
                   deadline: float | None,
                   carried: dict[str, dict[str, Any]] | None = None) -> bool:
        """Park the run for ``calls`` (fenced by ``attempt``; the worker lets go of it), with
        the earlier answers it ``carried``. False when it was dispatched again at once
        instead: a steer waits or cancel was asked."""
        ...

    async def decide(self, run_id: str, answers: Sequence[Answer]) -> bool:
        """Record the answers and append their events, all or none, in one atomic step; True
        when they were the last ones and the run was dispatched. ``DecisionRefused`` (naming
        the first answer that cannot be taken) leaves everything as it was."""
        ...

    async def wake(self, run_id: str) -> bool:
        """Dispatch a parked run now; False if it was not parked."""
        ...

    async def expire_due(self, at: float) -> list[str]:
        """Wake every parked run whose approval deadline is ``<= at``, marked expired."""
        ...

    async def parked_state(self, run_id: str) -> ParkedState | None:
        """The run's last parking (None: it never parked)."""
        ...


class ThreadStore(Protocol):
    """Threads: records, history, the atomic post and settle steps (each one atomic step on
    the thread and its runs, one Lua script on one Redis Cluster slot: what makes "at most one
    active run" and "no message lost at a run's end" hold under races)."""

    thread_ttl: float

    async def create_thread(self, record: ThreadRecord) -> None:
        """Store a new, idle thread."""
        ...

    async def create_thread_if_absent(self, record: ThreadRecord) -> bool:
        """Store ``record`` unless a thread with its id exists (one atomic step: of two
        racing creators exactly one stores it); whether this call stored it."""
        ...

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread, or None."""
        ...

    async def list_threads(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                           limit: int, cursor: str | None, owner: str | None = None
                           ) -> ThreadPage:
        """The tenant's threads (``owner``: an end user's only), newest first, filtered,
        paginated by an opaque cursor."""
        ...

    async def delete_thread(self, thread_id: str) -> None:
        """Drop the thread; its active run is cancelled (woken if parked, so a worker ends
        it) and a waiting run never starts."""
        ...

    async def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        """The conversation: the history plus what the active run added so far (its input
        before it started)."""
        ...

    async def thread_run_inputs(self, run_id: str) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
        """``(history, prompts)`` a run of a thread starts from."""
        ...

    async def post_thread_run(self, thread_id: str, post: ThreadPost) -> PostOutcome:
        """Post a message (``app.store.thread_records``); an interrupt or a steer wakes a
        parked active run in the same step. With ``post.create`` the thread is created first
        if absent, in the same step. A new run belongs to the thread's owner. Raises
        ``ThreadNotFound`` (also for a thread of another owner than ``post.owner``, when set),
        ``IdempotencyConflict``."""
        ...

    async def settle_thread(self, thread_id: str) -> str | None:
        """If the active run has ended: its messages join the history and the next run (if
        any message waits) is created and dispatched; returns that run's id."""
        ...

    async def wait_thread(self, thread_id: str, runs: int,
                          timeout: float) -> ThreadRecord | None:  # noqa: ASYNC109
        """The thread once it has more than ``runs`` runs, or after ``timeout`` s whatever
        it has (None: it is gone)."""
        ...


class AgentStore(Protocol):
    """A tenant's agents: every change a new version, each kept until the agent is deleted."""

    async def put_agent(self, tenant: str, name: str, definition: dict[str, Any], *,
                        create: bool) -> AgentRecord:
        """Store a new version (``create``: the first one; ``AgentExists`` when the agent
        exists), atomically numbered after the last."""
        ...

    async def get_agent(self, tenant: str, name: str,
                        version: int | None = None) -> AgentRecord | None:
        """The agent's latest version (or ``version``); None when there is none."""
        ...

    async def list_agents(self, tenant: str) -> list[AgentRecord]:
        """The latest version of each of the tenant's agents, by name."""
        ...

    async def agent_versions(self, tenant: str, name: str) -> list[AgentRecord]:
        """Every version of the agent, oldest first (empty when there is no such agent)."""
        ...

    async def delete_agent(self, tenant: str, name: str) -> bool:
        """Drop the agent and its versions; whether there was one."""
        ...


class Counters(Protocol):
    """Counts shared by every process (rate limits)."""

    async def count_hit(self, key: str, window: float) -> tuple[int, float]:
        """Count one hit on ``key`` in its current fixed window of ``window`` seconds:
        ``(hits in the window so far, seconds until it ends)``; atomic across processes."""
        ...


class QuotaStore(Protocol):
    """Quota counters and usage totals shared by every process (``app.store.quota_records``).
    The active set of a scope may hold runs that have ended by other ways than their worker's
    end (a deleted thread): ``app.api.quotas`` drops those, using ``run_statuses``."""

    async def admit(self, tenant: str, scopes: Sequence[QuotaScope], run_id: str,
                    at: float) -> Refusal | None:
        """Atomically: if every limit of every scope holds, add ``run_id`` to each scope's
        active set and rate window and return None; else change nothing and return the first
        limit hit."""
        ...

    async def release_active(self, tenant: str, subject: str | None, run_id: str, *,
                             rate: bool = False) -> None:
        """``run_id`` leaves the active sets of the tenant and of ``subject`` (and, with
        ``rate``, their rate windows: it never started); idempotent."""
        ...

    async def active_runs(self, tenant: str, subject: str | None) -> list[tuple[str, float]]:
        """The active set of one scope: ``(run_id, admitted at)``."""
        ...

    async def run_statuses(self, run_ids: Sequence[str]) -> list[str | None]:
        """Each run's status (None: no such run), in order."""
        ...

    async def accrue_usage(self, tenant: str, run_id: str, day: str,
                           values: Mapping[Dimension, str], counts: Mapping[str, int]) -> bool:
        """Add ``counts`` (``USAGE_METRICS``) to ``day``'s totals of each dimension's value;
        once per run: False (nothing added) when ``run_id`` was counted already."""
        ...

    async def usage(self, tenant: str, days: Sequence[str]) -> list[UsageLine]:
        """The tenant's totals on ``days``: one line per day, dimension and value."""
        ...


class WebhookOutbox(Protocol):
    """Webhook deliveries waiting to be sent, durable on Redis (``app.store.webhook_records``);
    kept with their run (gone when the run's record expires)."""

    async def add_webhook(self, delivery: WebhookDelivery) -> bool:
        """Store ``delivery``, due now; False (nothing changed) when its id is stored already."""
        ...

    async def claim_webhooks(self, at: float, lease: float, limit: int
                             ) -> list[WebhookDelivery]:
        """Up to ``limit`` deliveries due at ``at``, each made due again only ``lease``
        seconds later (another worker then takes it: this one died)."""
        ...

    async def webhook_attempted(self, delivery: WebhookDelivery) -> None:
        """Store ``delivery`` after an attempt: due at its ``next_at`` while ``pending``."""
        ...

    async def run_webhooks(self, run_id: str) -> list[WebhookDelivery]:
        """The run's deliveries, oldest first."""
        ...


class Backend(RunStore, EventLog, QueueStore, CancelSignal, Dispatch, ParkingStore, ThreadStore,
              AgentStore, Counters, QuotaStore, WebhookOutbox, Protocol):
    """Storage and coordination for runs: every concern above (both built-in backends)."""
