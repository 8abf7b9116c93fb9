"""``GET /usage``: a tenant's token usage, summed over UTC days and grouped by model, agent,
end user (subject) or day, from the totals ``app.worker.run_end`` counts as runs end.

For the tenant's API key only (an end user gets ``403``): usage is the operator's concern.
A run is counted on the day it ended; ``key`` is null for runs of no agent (``agent``) and
runs of the tenant's own key (``subject``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Literal, get_args

from pydantic import BaseModel, Field

from app.api.checks import invalid
from app.store.quota_records import UsageLine

GroupBy = Literal["model", "agent", "subject", "day"]
MAX_DAYS = 366
"""Longest span one request may sum."""
DEFAULT_DAYS = 30
"""The span when ``from`` is left out: the 30 days up to ``to``."""


class UsageRow(BaseModel):
    """One group's totals."""

    key: str | None = Field(description="the model, agent, subject or day (YYYY-MM-DD); null "
                            "for runs of no agent, or of the tenant's own key")
    runs: int = Field(description="runs that ended in the span")
    input_tokens: int
    output_tokens: int
    cached_tokens: int = Field(description="input tokens read from the provider's cache, "
                               "where it reports them")


class UsageReport(BaseModel):
    """``GET /usage``: groups in key order (days oldest first)."""

    usage: list[UsageRow]


def days_between(start: str | None, end: str | None) -> list[str]:
    """The UTC days from ``start`` to ``end`` (``YYYY-MM-DD``, both included): 422 naming
    ``from`` or ``to`` for a bad date, a reversed or too long span."""
    last = _day("to", end) if end else datetime.now(UTC).date()
    first = _day("from", start) if start else last - timedelta(days=DEFAULT_DAYS - 1)
    if first > last:
        raise invalid("from", "after to")
    if (last - first).days >= MAX_DAYS:
        raise invalid("from", f"at most {MAX_DAYS} days from to")
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def check_group(value: str) -> GroupBy:
    """``group_by`` checked (422 naming it)."""
    if value not in get_args(GroupBy):
        raise invalid("group_by", f"one of {', '.join(get_args(GroupBy))}")
    return value  # type: ignore[return-value]


def report(lines: Iterable[UsageLine], group_by: GroupBy) -> UsageReport:
    """Sum ``lines`` into one row per group."""
    dimension, by_day = ("tenant", True) if group_by == "day" else (group_by, False)
    rows: dict[str, UsageRow] = {}
    for line in lines:
        if line.dimension != dimension:
            continue
        key = line.day if by_day else line.value
        row = rows.setdefault(key, UsageRow(key=key or None, runs=0, input_tokens=0,
                                            output_tokens=0, cached_tokens=0))
        row.runs += line.runs
        row.input_tokens += line.input
        row.output_tokens += line.output
        row.cached_tokens += line.cached
    return UsageReport(usage=[rows[k] for k in sorted(rows)])


def _day(field: str, value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise invalid(field, "a date, YYYY-MM-DD") from None
