"""The store side of parked runs (``app.approvals``), beside ``base.Backend``.

A run whose picks wait for a person is *parked*: status ``requires_action``, no worker, no
job, no lease; what it waits for and the answers so far are in the store. Waking it (every pick
answered, a steer, a cancel, the approval timeout) sets it ``queued`` and dispatches it again,
so any worker continues it from its checkpoint. Each step is atomic per run, which is what makes
a decision racing a cancel, a steer or the timeout come out exactly one way::

    park ─▶ requires_action ─┬─ decide (not last) ─▶ requires_action (answer kept)
                             ├─ decide (last) ──────▶ queued ─▶ a worker continues
                             ├─ steer / cancel ─────▶ queued ─▶ (decide now: NotWaiting, 409)
                             └─ expire_due ─────────▶ queued, expired ─▶ unanswered denied
    park while a steer waits or cancel was asked ─▶ queued at once (never parked)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.engine.events import ApprovalDecided

REQUIRES_ACTION = "requires_action"


class DecisionRefused(Exception):
    """A decision that cannot be taken: ``code`` is ``not_waiting`` (the run does not wait:
    running, ended, or woken by a cancel, steer or timeout that won), ``unknown_call`` or
    ``already_decided`` (HTTP 409 each)."""

    def __init__(self, code: Literal["not_waiting", "unknown_call", "already_decided"],
                 message: str) -> None:
        super().__init__(message)
        self.code = code


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


class ParkingStore(Protocol):
    """Parking operations of a backend (see the module docstring); ``BackendError`` as usual."""

    async def park(self, run_id: str, attempt: int, calls: list[dict[str, Any]],
                   deadline: float | None,
                   carried: dict[str, dict[str, Any]] | None = None) -> bool:
        """Park the run for ``calls`` (fenced by ``attempt``; the worker lets go of it), with
        the earlier answers it ``carried``. False when it was dispatched again at once
        instead: a steer waits or cancel was asked."""
        ...

    async def decide(self, run_id: str, tool_call_id: str, decision: dict[str, Any],
                     event: ApprovalDecided) -> bool:
        """Record one answer and append ``event`` to the log, atomically; True when it was the
        last one and the run was dispatched. Raises ``DecisionRefused``."""
        ...

    async def wake(self, run_id: str) -> bool:
        """Dispatch a parked run now (a steer or cancel arrived); False if it was not parked."""
        ...

    async def expire_due(self, at: float) -> list[str]:
        """Wake every parked run whose approval deadline is ``<= at``, marked expired."""
        ...

    async def parked_state(self, run_id: str) -> ParkedState | None:
        """The run's last parking (None: it never parked)."""
        ...
