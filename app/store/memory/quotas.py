"""``QuotaStore`` of the in-process backend: the same semantics as Redis's ``ADMIT`` and
``ACCRUE`` scripts, each a step with no await (so atomic on the event loop)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.store.memory.core import MemoryCore
from app.store.quota_records import Dimension, QuotaScope, Refusal, UsageLine, lines_of, utc_day

WINDOW = 60.0
"""Seconds of the ``runs_per_minute`` window."""


class MemoryQuotas(MemoryCore):
    """See ``app.store.contract.QuotaStore``."""

    async def admit(self, tenant: str, scopes: Sequence[QuotaScope], run_id: str,
                    at: float) -> Refusal | None:
        """See ``QuotaStore.admit``."""
        active, rate, usage = self._q_active, self._q_rate, self._q_usage
        for scope in scopes:
            key = (tenant, scope.subject)
            window = rate.setdefault(key, {})
            for old in [r for r, t in window.items() if t <= at - WINDOW]:
                del window[old]
            if scope.max_active_runs is not None and \
                    len(active.get(key, {})) >= scope.max_active_runs:
                return Refusal("max_active_runs", scope.subject, None)
            if scope.runs_per_minute is not None and len(window) >= scope.runs_per_minute:
                oldest = min(window.values(), default=at)
                return Refusal("runs_per_minute", scope.subject, oldest + WINDOW - at)
            if scope.tokens_per_day is not None:
                totals = usage.get((tenant, utc_day(at)), {})
                dim = ("tenant", "") if scope.subject is None else ("subject", scope.subject)
                if totals.get((*dim, "tokens"), 0) >= scope.tokens_per_day:
                    return Refusal("tokens_per_day", scope.subject, None)
        for scope in scopes:  # only where a limit is set: nothing else ever empties them
            if scope.max_active_runs is not None:
                active.setdefault((tenant, scope.subject), {})[run_id] = at
            if scope.runs_per_minute is not None:
                rate.setdefault((tenant, scope.subject), {})[run_id] = at
        return None

    async def release_active(self, tenant: str, subject: str | None, run_id: str, *,
                             rate: bool = False) -> None:
        """See ``QuotaStore.release_active``."""
        active, windows = self._q_active, self._q_rate
        for who in {None, subject}:
            active.get((tenant, who), {}).pop(run_id, None)
            if rate:
                windows.get((tenant, who), {}).pop(run_id, None)

    async def active_runs(self, tenant: str, subject: str | None) -> list[tuple[str, float]]:
        """See ``QuotaStore.active_runs``."""
        return list(self._q_active.get((tenant, subject), {}).items())

    async def run_statuses(self, run_ids: Sequence[str]) -> list[str | None]:
        """See ``QuotaStore.run_statuses``."""
        return [r.status if (r := self._runs.get(i)) is not None else None for i in run_ids]

    async def accrue_usage(self, tenant: str, run_id: str, day: str,
                           values: Mapping[Dimension, str], counts: Mapping[str, int]) -> bool:
        """See ``QuotaStore.accrue_usage``."""
        usage = self._q_usage
        if day not in self._q_accrued and len(self._q_accrued) >= 2:  # as Redis's 2-day TTL
            del self._q_accrued[min(self._q_accrued)]
        accrued = self._q_accrued.setdefault(day, set())
        if (tenant, run_id) in accrued:
            return False
        accrued.add((tenant, run_id))
        totals = usage.setdefault((tenant, day), {})
        for dimension, value in values.items():
            for metric, n in counts.items():
                key = (dimension, value, metric)
                totals[key] = totals.get(key, 0) + n
        return True

    async def usage(self, tenant: str, days: Sequence[str]) -> list[UsageLine]:
        """See ``QuotaStore.usage``."""
        usage = self._q_usage
        out: list[UsageLine] = []
        for day in days:
            out += lines_of(day, usage.get((tenant, day), {}))
        return out

