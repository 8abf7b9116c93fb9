"""What the store raises. Backends know no HTTP; the API maps each to its status::

    BackendError              the store is unreachable or failed (HTTP: 503 + Retry-After)
    ├── FencedOut             this worker's attempt is stale: stop driving the run
    ├── IdempotencyConflict   same Idempotency-Key, different body (HTTP: 409)
    ├── RunNotFound           no such run for this tenant (HTTP: 404)
    ├── ThreadNotFound        no such thread for this tenant (HTTP: 404)
    ├── QueueItemTaken        withdraw of a message the loop already took (HTTP: 409)
    ├── AgentExists           an agent of that name exists already (HTTP: 409)
    ├── NotLastReply          a regenerate names a run that is not its thread's last (409)
    ├── RunEnded              the run has ended or is ending: no message, no event (HTTP: 409)
    └── QueueFull             the run already holds its most waiting messages (HTTP: 409)
    DecisionRefused           an answer to a parked run that cannot be taken (HTTP: 409)
"""

from __future__ import annotations

from typing import Literal


class BackendError(Exception):
    """The store failed or cannot be reached."""


class FencedOut(BackendError):
    """The run was claimed by another worker (its attempt is newer than ours)."""


class IdempotencyConflict(BackendError):
    """An ``Idempotency-Key`` was reused with a different request body."""


class RunNotFound(BackendError):
    """No such run (or not this tenant's)."""


class ThreadNotFound(BackendError):
    """No such thread (or not this tenant's)."""


class AgentExists(BackendError):
    """An agent of that name exists already (creating it again)."""


class NotLastReply(BackendError):
    """A thread post replaces a run that is not the thread's last (``ThreadPost.replaces``)."""


class QueueItemTaken(BackendError):
    """The queued message was already taken by the loop."""


class RunEnded(BackendError):
    """The run has ended (terminal status) or its queues are closed because it is ending."""


class QueueFull(BackendError):
    """The run already holds ``limit`` messages waiting to be taken (its steering and
    follow-up queues together, or the input of a thread's run that has not started):
    nothing was queued."""

    def __init__(self, run_id: str, limit: int) -> None:
        super().__init__(f"run {run_id} already holds {limit} waiting messages")
        self.run_id = run_id
        self.limit = limit


RefusalCode = Literal["not_waiting", "unknown_call", "already_decided"]


class DecisionRefused(Exception):
    """A decision that cannot be taken: ``code`` is ``not_waiting`` (the run does not wait:
    running, ended, or woken by a cancel, steer or timeout that won), ``unknown_call`` or
    ``already_decided``; ``call_id`` the answer refused (of several given at once)."""

    def __init__(self, code: RefusalCode, message: str, call_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.call_id = call_id
