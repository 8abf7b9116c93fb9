"""``QuotaStore`` on every backend: admission takes every limit of every scope or none, a
release gives the slot back, usage is counted once per run (issue 32)."""

from __future__ import annotations

import asyncio
import time

from app.store import Backend
from app.store.quota_records import QuotaScope, utc_day
from app.store.records import RunRecord

T = "acme"


async def test_admission_holds_every_scope_and_releases(backend: Backend) -> None:
    scopes = [QuotaScope(max_active_runs=3), QuotaScope(subject="u1", max_active_runs=1)]
    now = time.time()
    assert await backend.admit(T, scopes, "run_a", now) is None
    refused = await backend.admit(T, scopes, "run_b", now)
    assert refused is not None and (refused.limit, refused.subject) == ("max_active_runs", "u1")
    other = [scopes[0], QuotaScope(subject="u2", max_active_runs=1)]
    assert await backend.admit(T, other, "run_c", now) is None
    assert await backend.admit(T, [scopes[0]], "run_d", now) is None
    refused = await backend.admit(T, [scopes[0]], "run_e", now)
    assert refused is not None and (refused.limit, refused.subject) == ("max_active_runs", None)
    assert sorted(r for r, _ in await backend.active_runs(T, None)) == ["run_a", "run_c",
                                                                         "run_d"]
    await backend.release_active(T, "u1", "run_a")
    assert await backend.active_runs(T, "u1") == []
    assert await backend.admit(T, scopes, "run_b", now) is None  # both scopes had room again


async def test_the_minute_window_slides_and_says_when(backend: Backend) -> None:
    scope = [QuotaScope(runs_per_minute=2)]
    t0 = time.time() - 50
    assert await backend.admit(T, scope, "r1", t0) is None
    assert await backend.admit(T, scope, "r2", t0 + 10) is None
    refused = await backend.admit(T, scope, "r3", t0 + 20)
    assert refused is not None and refused.limit == "runs_per_minute"
    assert refused.retry_after is not None and abs(refused.retry_after - 40) < 0.01
    assert await backend.admit(T, scope, "r3", t0 + 61) is None  # r1 left the window
    await backend.release_active(T, None, "r3", rate=True)  # never started: not counted
    assert await backend.admit(T, scope, "r4", t0 + 62) is None
    assert await backend.admit(T, [QuotaScope(runs_per_minute=0)], "r5", t0) is not None


async def test_usage_counts_once_and_holds_tokens_per_day(backend: Backend) -> None:
    now = time.time()
    day = utc_day(now)
    values = {"tenant": "", "subject": "u1", "agent": "", "model": "fake:m"}
    counts = {"runs": 1, "input": 70, "output": 30, "cached": 5, "tokens": 100}
    assert await backend.accrue_usage(T, "run_1", day, values, counts) is True  # type: ignore[arg-type]
    assert await backend.accrue_usage(T, "run_1", day, values, counts) is False  # type: ignore[arg-type]
    lines = {(x.dimension, x.value): x for x in await backend.usage(T, [day, "2000-01-01"])}
    assert set(lines) == {("tenant", ""), ("subject", "u1"), ("agent", ""), ("model", "fake:m")}
    assert (lines[("model", "fake:m")].runs, lines[("model", "fake:m")].input,
            lines[("model", "fake:m")].output, lines[("model", "fake:m")].cached) == (1, 70, 30, 5)
    refused = await backend.admit(T, [QuotaScope(tokens_per_day=100)], "run_2", now)
    assert refused is not None and refused.limit == "tokens_per_day"
    assert await backend.admit(T, [QuotaScope(tokens_per_day=101)], "run_2", now) is None
    refused = await backend.admit(T, [QuotaScope(subject="u1", tokens_per_day=100)], "r3", now)
    assert refused is not None and refused.subject == "u1"
    assert await backend.admit(T, [QuotaScope(subject="u2", tokens_per_day=100)], "r3",
                               now) is None


async def test_usage_reads_back_values_holding_any_character(backend: Backend) -> None:
    """An end user's subject (a token's, an identity provider's ``sub``) and a model name are
    the caller's strings: one holding the Redis field's separator (``\\x1f``) once made
    ``GET /usage`` a 500 for the whole tenant and day, and could be read as another value."""
    day = utc_day(time.time())
    odd = ["u\x1fx", "\x1f", "a\x1fb\x1fruns", "", "\x1fsubject"]
    for i, subject in enumerate(odd):
        values = {"tenant": "", "subject": subject, "agent": "", "model": f"m:{subject}"}
        counts = {"runs": 1, "input": i + 1, "output": 0, "cached": 0, "tokens": i + 1}
        assert await backend.accrue_usage("odd", f"run_{i}", day, values, counts)  # type: ignore[arg-type]
    lines = {(x.dimension, x.value): x for x in await backend.usage("odd", [day])}
    assert {v for d, v in lines if d == "subject"} == set(odd)
    assert {v for d, v in lines if d == "model"} == {f"m:{s}" for s in odd}
    for i, subject in enumerate(odd):
        assert (lines[("subject", subject)].runs, lines[("subject", subject)].input) == (1, i + 1)
    assert lines[("tenant", "")].runs == len(odd)
    refused = await backend.admit("odd", [QuotaScope(subject="\x1f", tokens_per_day=2)],
                                  "run_x", time.time())
    assert refused is not None and refused.subject == "\x1f"  # the same field, read by ADMIT


async def test_concurrent_admissions_never_pass_the_limit(backend: Backend) -> None:
    scopes = [QuotaScope(max_active_runs=7, runs_per_minute=1000)]
    now = time.time()
    results = await asyncio.gather(*[backend.admit(T, scopes, f"run_{n}", now)
                                     for n in range(60)])
    assert sum(r is None for r in results) == 7
    assert len(await backend.active_runs(T, None)) == 7


async def test_run_statuses(backend: Backend) -> None:
    record = RunRecord(id="run_" + "1" * 32, tenant=T, created_at=time.time())
    await backend.create_run(record)
    assert await backend.run_statuses([record.id, "run_" + "2" * 32]) == ["queued", None]
    assert await backend.run_statuses([]) == []
