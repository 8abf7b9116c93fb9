"""Figures from run records and /proc samples: percentiles, one JSON row per measured cell."""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench._procs import Proc, fake_stats
from bench._workload import Workload


def pct(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100), None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def ms(values: Sequence[float]) -> dict[str, float | None]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 2)

    return {"p50": r(pct(values, 50)), "p99": r(pct(values, 99)), "max": r(pct(values, 100))}


def client_cpu_s() -> float:
    """This process's CPU and its reaped children's (``drive_split``'s client processes)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + kids.ru_utime + kids.ru_stime


@dataclass
class Sample:
    """CPU counters at one instant: the system's tree (redis included), the fake, the client."""

    server: float
    redis: float
    fake: float
    client: float
    llm_requests: int
    llm_connections: int

    @classmethod
    def take(cls, server: Proc, fake: Proc) -> Sample:
        redis = sum(p.cpu_s() for p in server.extra)
        stats = fake_stats(fake)
        return cls(server.cpu_s(), redis, fake.cpu_s(), client_cpu_s(), stats["requests"],
                   stats.get("connections", 0))


def load_avg() -> float:
    """The 1-minute load average (other work on the machine shows here)."""
    return round(os.getloadavg()[0], 2)


def row(system: str, concurrency: int, work: Workload, before: Sample, after: Sample,
        server: Proc) -> dict[str, Any]:
    """The JSON line for one (system, concurrency) cell."""
    recs = work.records
    ok = [r for r in recs if r.ok]
    n = max(1, len(recs))
    errors = sorted({r.error for r in recs if r.error})
    mem = server.mem_mb()
    return {
        "system": system, "concurrency": concurrency, "runs": len(recs), "ok": len(ok),
        "errors": len(recs) - len(ok), "error_kinds": errors[:3],
        "wall_s": round(work.wall_s, 3),
        "runs_per_s": round(len(ok) / work.wall_s, 2) if work.wall_s else None,
        "first_event_ms": ms([r.first_event for r in ok if r.first_event is not None]),
        "first_delta_ms": ms([r.first_delta for r in ok if r.first_delta is not None]),
        "end_ms": ms([r.end for r in ok if r.end is not None]),
        "events_per_run": round(sum(r.events for r in ok) / max(1, len(ok)), 1),
        "llm_calls_per_run": round((after.llm_requests - before.llm_requests) / n, 2),
        "llm_calls": after.llm_requests - before.llm_requests,
        "llm_connections": after.llm_connections - before.llm_connections,
        "lag_ms": ms([lag for r in ok for lag in r.lags]),
        "load_avg": load_avg(),
        "server_cpu_ms_per_run": round((after.server - before.server) / n * 1000, 3),
        "server_cpu_util": round((after.server - before.server) / work.wall_s, 3)
        if work.wall_s else None,
        "redis_cpu_ms_per_run": round((after.redis - before.redis) / n * 1000, 3)
        if server.extra else None,
        "fake_llm_cpu_ms_per_run": round((after.fake - before.fake) / n * 1000, 3),
        "client_cpu_ms_per_run": round((after.client - before.client) / n * 1000, 3),
        "peak_rss_mb": round(mem["hwm"], 1), "rss_mb": round(mem["rss"], 1),
    }
