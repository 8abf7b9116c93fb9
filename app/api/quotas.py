"""Quotas (``AGENTLOOP_TENANT_LIMITS``): how many runs a tenant, and each end user of it, may
have active, start per minute, and how many tokens their runs may spend per UTC day. Checked
by the run pipeline at every door, right before the store creates the run; beyond a limit,
``429 quota_exceeded`` with ``Retry-After`` and the limit named (``field``).

Exactness: one store step (``QuotaStore.admit``: the Redis ``ADMIT`` script) checks every
limit and takes them all, so concurrent requests on any number of replicas never admit more
than a limit allows. A run holds its active slot until it ends: its worker releases it (any
end: completed, failed, cancelled, a crash's recovery, an expired approval), and a run that
ended otherwise (its thread deleted, its record expired) is dropped from the set when the set
is next found full::

    admit ─ full? ─ no ─▶ admitted
              └ yes ─ statuses of the set's runs ─ drop the ended (and the unknown admitted
                      over GRACE ago) ─ admit again ─ full? ─ 429

``tokens_per_day`` counts the input + output tokens of the runs that ended that UTC day
(``app.worker.run_end``): it refuses new runs once spent; runs already going finish (bound
each with ``max_total_tokens``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from app.api.auth import Principal
from app.api.errors import ApiError
from app.api.services import Services
from app.config import Limits
from app.store.quota_records import ADMITTED, QuotaScope, Refusal
from app.store.records import TERMINAL, RunRecord
from app.telemetry import metrics

GRACE = 60.0
"""Seconds an admitted run may take to appear in the store before a full active set drops
it (a request admitted and not yet created, or created and refused)."""


@dataclass(slots=True, frozen=True)
class Admission:
    """A run's taken quota: ``release`` it when no run came of the request."""

    tenant: str
    subject: str | None
    run_id: str


def scopes_of(svc: Services, who: Principal) -> list[QuotaScope]:
    """The limits that hold for ``who``: its tenant's, and its own as an end user."""
    limits = svc.settings.limits_for(who.tenant)
    if limits is None:
        return []
    scopes = [_scope(limits, None)] if _any(limits) else []
    if who.subject is not None and limits.per_subject is not None and _any(limits.per_subject):
        scopes.append(_scope(limits.per_subject, who.subject))
    return scopes


async def admit(svc: Services, who: Principal, run_id: str) -> Admission | None:
    """Take ``who``'s quotas for the run ``run_id`` (None: no quota holds), or 429."""
    scopes = scopes_of(svc, who)
    if not scopes:
        return None
    refused = await svc.backend.admit(who.tenant, scopes, run_id, time.time())
    if refused is not None and refused.limit == "max_active_runs":
        # asked again even when nothing was dropped: a worker may have given a slot back
        # between the refusal and the read of the set
        await _drop_ended(svc, who.tenant, refused.subject)
        refused = await svc.backend.admit(who.tenant, scopes, run_id, time.time())
    if refused is not None:
        metrics.QUOTA_REFUSALS.labels(refused.limit).inc()
        raise quota_exceeded(who.tenant, refused, scopes)
    return Admission(who.tenant, who.subject, run_id)


def mark(record: RunRecord, admission: Admission | None) -> None:
    """Record on the run that it holds an active slot, so that its end gives one back (a run
    under no limit costs its end no store call)."""
    if admission is not None:
        record.request[ADMITTED] = True


async def release(svc: Services, admission: Admission | None) -> None:
    """No run came of the request: give back what ``admit`` took (its active slot and its
    place in the minute's window)."""
    if admission is not None:
        await svc.backend.release_active(admission.tenant, admission.subject,
                                         admission.run_id, rate=True)


async def _drop_ended(svc: Services, tenant: str, subject: str | None) -> None:
    """Drop the runs of a full active set that have ended."""
    active = await svc.backend.active_runs(tenant, subject)
    statuses = await svc.backend.run_statuses([run_id for run_id, _ in active])
    cutoff = time.time() - GRACE
    ended = [run_id for (run_id, admitted), status in zip(active, statuses, strict=True)
             if status in TERMINAL or (status is None and admitted < cutoff)]
    for run_id in ended:
        await svc.backend.release_active(tenant, subject, run_id)


def quota_exceeded(tenant: str, refused: Refusal, scopes: list[QuotaScope]) -> ApiError:
    """429 ``quota_exceeded`` naming the limit (``field``), with ``Retry-After``."""
    scope = next(s for s in scopes if s.subject == refused.subject)
    value = getattr(scope, refused.limit)
    wait = max(1, math.ceil(_retry_after(refused)))
    whose = f"tenant {tenant}" if refused.subject is None else "this user"
    return ApiError(429, "quota_exceeded", f"{refused.limit}: {whose} is at its limit of "
                    f"{value}; retry in {wait} s", refused.limit,
                    headers={"Retry-After": str(wait)})


def _retry_after(refused: Refusal) -> float:
    if refused.retry_after is not None:
        return refused.retry_after
    if refused.limit == "tokens_per_day":  # the next UTC midnight
        return 86400 - time.time() % 86400
    return 1.0  # max_active_runs: as soon as a run ends, which no one can tell


def _any(limits: Limits) -> bool:
    return any(v is not None for v in (limits.max_active_runs, limits.runs_per_minute,
                                        limits.tokens_per_day))


def _scope(limits: Limits, subject: str | None) -> QuotaScope:
    return QuotaScope(subject=subject, max_active_runs=limits.max_active_runs,
                      runs_per_minute=limits.runs_per_minute,
                      tokens_per_day=limits.tokens_per_day)
