"""``QuotaStore`` on Redis: a tenant's quota sets and usage totals share the slot
``{quota:<tenant>}`` (``keys``), so one ``ADMIT`` script checks and takes every limit of the
tenant and its end user atomically, whichever replica asks; usage is one ``ACCRUE`` per run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from app.store.quota_records import Dimension, QuotaScope, Refusal, UsageLine, lines_of, utc_day
from app.store.redis import keys
from app.store.redis.core import RedisCore
from app.store.redis.errors import guard
from app.store.redis.records import pairs

USAGE_TTL = 400 * 86400
"""Seconds a day's usage totals are kept (a little over a year of ``GET /usage``)."""
SEP = "\x1f"


def _limit(value: int | None) -> int:
    return -1 if value is None else value


def usage_field(dimension: str, value: str, metric: str) -> str:
    """The usage hash's field of one count (``usage_of_field`` reads it back)."""
    return f"{dimension}{SEP}{value}{SEP}{metric}"


def usage_of_field(field: str) -> tuple[str, str, str]:
    """``(dimension, value, metric)`` of a field ``usage_field`` wrote. The value is whatever
    lies between the first and the last separator: a dimension and a metric are names of
    ours and never hold one, while a value (an end user's subject, a model name) may, so the
    reading cannot be ambiguous and never fails on what a caller chose."""
    dimension, rest = field.split(SEP, 1)
    value, metric = rest.rsplit(SEP, 1)
    return dimension, value, metric


class RedisQuotas(RedisCore):
    """See ``app.store.contract.QuotaStore``."""

    @guard
    async def admit(self, tenant: str, scopes: Sequence[QuotaScope], run_id: str,
                    at: float) -> Refusal | None:
        """See ``QuotaStore.admit``."""
        keys_ = [keys.usage_key(tenant, utc_day(at))]
        args: list[Any] = [int(at * 1000), run_id]
        for scope in scopes:
            keys_ += [keys.quota_active_key(tenant, scope.subject),
                      keys.quota_rate_key(tenant, scope.subject)]
            field = usage_field("tenant", "", "tokens") if scope.subject is None else \
                usage_field("subject", scope.subject, "tokens")
            args += [_limit(scope.max_active_runs), _limit(scope.runs_per_minute),
                     _limit(scope.tokens_per_day), field]
        reply = await self._run("ADMIT", keys_, args)
        if not reply:
            return None
        index, limit, wait = int(reply[0]), _text(reply[1]), int(reply[2])
        return Refusal(limit, scopes[index].subject, None if wait < 0 else wait / 1000)

    @guard
    async def release_active(self, tenant: str, subject: str | None, run_id: str, *,
                             rate: bool = False) -> None:
        """See ``QuotaStore.release_active``."""
        scopes = {None, subject}
        commands: list[tuple[str | bytes, ...]] = [
            ("ZREM", keys.quota_active_key(tenant, s), run_id) for s in scopes]
        if rate:
            commands += [("ZREM", keys.quota_rate_key(tenant, s), run_id) for s in scopes]
        await self._commands(*commands)

    @guard
    async def active_runs(self, tenant: str, subject: str | None) -> list[tuple[str, float]]:
        """See ``QuotaStore.active_runs``."""
        raw: Any = await self.client.zrange(keys.quota_active_key(tenant, subject), 0, -1,
                                            withscores=True)
        return [(_text(member), float(score) / 1000) for member, score in raw]

    @guard
    async def run_statuses(self, run_ids: Sequence[str]) -> list[str | None]:
        """See ``QuotaStore.run_statuses``."""
        if not run_ids:
            return []
        replies = await self._commands(*[("HGET", keys.run_key(r), "status") for r in run_ids])
        return [None if raw is None else str(orjson.loads(raw)) for raw in replies]

    @guard
    async def accrue_usage(self, tenant: str, run_id: str, day: str,
                           values: Mapping[Dimension, str], counts: Mapping[str, int]) -> bool:
        """See ``QuotaStore.accrue_usage``."""
        args: list[Any] = [run_id, USAGE_TTL]
        for dimension, value in values.items():
            for metric, n in counts.items():
                args += [usage_field(dimension, value, metric), n]
        done = await self._run("ACCRUE", [keys.usage_key(tenant, day),
                                          keys.accrued_key(tenant, day)], args)
        return bool(int(done))

    @guard
    async def usage(self, tenant: str, days: Sequence[str]) -> list[UsageLine]:
        """See ``QuotaStore.usage``."""
        replies = await self._commands(*[("HGETALL", keys.usage_key(tenant, d)) for d in days])
        out: list[UsageLine] = []
        for day, raw in zip(days, replies, strict=True):
            totals: dict[tuple[str, str, str], int] = {}
            for field, n in pairs(raw).items():
                totals[usage_of_field(_text(field))] = int(n)
            out += lines_of(day, totals)
        return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

