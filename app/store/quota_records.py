"""What the quota and usage stores take and give (``app.store.contract.QuotaStore``).

A tenant's quota counters and usage totals live together (on Redis in one slot per tenant),
so one admission checks and takes every limit of the tenant and of its end user at once::

    admit(tenant, [tenant scope, subject scope], run) ─ every limit holds? ─ yes: the run joins
        both active sets and both rate windows ─ no: nothing changes; the first limit hit

Usage is counted per UTC day, once per run (``accrue_usage`` is idempotent by run id), in
``UsageLine``s whose dimension is the tenant, a subject, an agent or a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

Dimension = Literal["tenant", "subject", "agent", "model"]
"""What a usage total is counted by (``tenant``: the tenant's own total)."""
USAGE_METRICS = ("runs", "input", "output", "cached", "tokens")
"""The counts kept of each dimension's value: runs ended, input, output and cache-read tokens,
and input + output (what ``tokens_per_day`` is held to)."""


@dataclass(slots=True, frozen=True, kw_only=True)
class QuotaScope:
    """The limits of one scope: the tenant (``subject`` None) or one of its end users. A
    limit of None is no limit; 0 admits nothing."""

    subject: str | None = None
    max_active_runs: int | None = None
    runs_per_minute: int | None = None
    tokens_per_day: int | None = None


@dataclass(slots=True, frozen=True)
class Refusal:
    """A limit an admission hit: its name, the scope it belongs to (None: the tenant's) and
    the seconds until it may admit again (None: unknown, a run must end first)."""

    limit: str
    subject: str | None
    retry_after: float | None


@dataclass(slots=True, frozen=True)
class UsageLine:
    """One value of one dimension on one day: ``value`` is the subject, agent or model (``""``
    for the tenant's total, and for runs of no agent or of no end user)."""

    day: str
    dimension: Dimension
    value: str
    runs: int = 0
    input: int = 0
    output: int = 0
    cached: int = 0


def utc_day(t: float) -> str:
    """``YYYY-MM-DD`` of a UNIX time, in UTC (the day usage and ``tokens_per_day`` count in)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def lines_of(day: str, totals: Mapping[tuple[str, str, str], int]) -> list[UsageLine]:
    """One day's totals (``(dimension, value, metric) → n``) as lines."""
    rows: dict[tuple[str, str], dict[str, int]] = {}
    for (dimension, value, metric), n in totals.items():
        rows.setdefault((dimension, value), {})[metric] = n
    return [UsageLine(day=day, dimension=dim, value=value,  # type: ignore[arg-type]
                      runs=m.get("runs", 0), input=m.get("input", 0),
                      output=m.get("output", 0), cached=m.get("cached", 0))
            for (dim, value), m in sorted(rows.items())]


ADMITTED = "quota_admitted"
"""The key, in a run's stored request, that says it holds an active slot (``app.api.quotas``):
its end gives the slot back; a run under no limit has none to give."""
