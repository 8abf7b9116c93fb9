"""Where a new browser's first event waits: the production-path load (C runs at once, each on
a new connection, the paced https fake model) with each run's first-event time cut in phases::

    t0 ── connect ── POST /runs ── 201 ── GET events ── headers ── first event
          connect     create                 headers                first

Per phase p50/p99 in ms over every run, the server's CPU per run (redis-server's included on
agentloop-redis; the profiled round's figure carries py-spy's own cost) and its CPU
utilisation over the load: a phase that is long while the server is far from busy is waiting
on something other than the CPU (the accept queue, a poll, a timer)::

    .venv/bin/python bench/first_event.py [--system agentloop|agentloop-redis] [--runs 200]
        [--concurrency 50] [--rounds 3] [--client-procs 2] [--profile SECONDS]

``--profile`` samples the server with py-spy (``bench/_profile.py``) for the first SECONDS of
the first round's load and prints where its CPU went, by stage, file and function: the
production cell's profile (every run a new connection, paced https model), as against the
live-streams profile ``make bench`` prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _profile
from bench._client import Connection
from bench._live import FRAME_MS
from bench._procs import OUT, Proc, start_fake
from bench._stats import load_avg, ms
from bench._systems import start_agentloop
from bench._tls import make_tls
from bench._workload import RUN_BODY, create_run, events_path, split_across

PHASES = ("connect", "create", "headers", "first")


@dataclass
class _Phases:
    times: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    totals: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def _one(port: int, out: _Phases) -> None:
    conn = Connection("127.0.0.1", port)
    try:
        t0 = time.monotonic()
        await conn._open()
        t1 = time.monotonic()
        run = await create_run(conn, RUN_BODY)
        t2 = time.monotonic()
        t3 = first = None
        async for data, at in conn.raw_events(events_path(str(run["events_url"]))):
            if t3 is None:
                t3 = at
            if first is None and b"\n\n" in data and b"event: " in data:
                first = at
            if b"event: agent_end" in data:
                break
        if t3 is None or first is None:
            out.errors.append("no event")
            return
        for name, span in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, first - t3), strict=True):
            out.times[name].append(span)
        out.totals.append(first - t0)
    except Exception as exc:
        out.errors.append(f"{type(exc).__name__}: {exc}"[:200])
    finally:
        conn.close()


async def _load(port: int, runs: int, concurrency: int) -> _Phases:
    out, todo = _Phases(), iter(range(runs))

    async def worker() -> None:
        for _ in todo:
            async with asyncio.timeout(60):
                await _one(port, out)

    async with asyncio.TaskGroup() as tg:
        for _ in range(concurrency):
            tg.create_task(worker())
    return out


def _load_part(port: int, runs: int, concurrency: int) -> _Phases:
    return asyncio.run(_load(port, runs, concurrency))


def _split_load(port: int, runs: int, concurrency: int, procs: int) -> _Phases:
    """``_load`` from ``procs`` client processes at once (browsers do not share an event
    loop), the runs and concurrency split between them, the phases merged."""
    if procs <= 1:
        return _load_part(port, runs, concurrency)
    parts = split_across(_load_part, procs, runs, concurrency, port)
    out = _Phases()
    for part in parts:
        for name in PHASES:
            out.times[name] += part.times[name]
        out.totals += part.totals
        out.errors += part.errors
    return out


def _profiled_load(server: Proc, runs: int, concurrency: int, seconds: float,
                   procs: int) -> tuple[_Phases, dict[str, Any]]:
    with ThreadPoolExecutor(1) as pool:
        profile = pool.submit(_profile.record, server.popen.pid, seconds)
        phases = _split_load(server.port, runs, concurrency, procs)
        return phases, profile.result()


def _round(system: str, fake: Proc, runs: int, concurrency: int,
           profile_s: float = 0.0, procs: int = 2) -> dict[str, Any]:
    server = start_agentloop(fake, redis=system == "agentloop-redis", name=f"{system}-first")
    profile: dict[str, Any] | None = None
    try:
        asyncio.run(_load(server.port, 20, 10))  # warm-up
        cpu0, t0 = server.cpu_s(), time.monotonic()
        if profile_s:
            phases, profile = _profiled_load(server, runs, concurrency, profile_s, procs)
        else:
            phases = _split_load(server.port, runs, concurrency, procs)
        cpu = server.cpu_s() - cpu0
        util = cpu / (time.monotonic() - t0)
    finally:
        server.stop()
    done = len(phases.totals)
    return {"system": system, "load_avg": load_avg(), "server_util": round(util, 3),
            "server_cpu_ms_per_run": round(1000 * cpu / done, 2) if done else None,
            "errors": sorted(set(phases.errors))[:3], "first_event_ms": ms(phases.totals),
            **{f"{p}_ms": ms(v) for p, v in phases.times.items()},
            **({"profile": profile} if profile is not None else {})}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--system", default="agentloop")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--client-procs", type=int, default=2,
                   help="client processes the runs are split between (as make bench)")
    p.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                   help="py-spy the server for SECONDS of the first round's load")
    args = p.parse_args(argv)
    fake = start_fake(FRAME_MS, name="fake_llm_first", tls=make_tls(OUT / "tls"))
    try:
        rounds = [_round(args.system, fake, args.runs, args.concurrency,
                         args.profile if i == 0 else 0.0, args.client_procs)
                  for i in range(args.rounds)]
    finally:
        fake.stop()
    for r in rounds:
        profile = r.pop("profile", None)
        print(json.dumps(r))
        if profile is not None:
            _print_profile(profile)
    summary: dict[str, Any] = {
        f"{k}_p50_median": statistics.median(r[k]["p50"] for r in rounds)
        for k in ("first_event_ms", *(f"{p}_ms" for p in PHASES))}
    cpu = [r["server_cpu_ms_per_run"] for r in rounds if r["server_cpu_ms_per_run"] is not None]
    summary["server_cpu_ms_per_run_median"] = statistics.median(cpu) if cpu else None
    summary["util_median"] = statistics.median(r["server_util"] for r in rounds)
    print(json.dumps(summary))


def _print_profile(profile: dict[str, Any]) -> None:
    if "skipped" in profile:
        print(f"profile skipped: {profile['skipped']}")
        return
    print(f"profile ({profile['samples']} samples, self time, % of samples):")
    for key in ("stages_pct", "files_pct", "functions_pct"):
        print(f"  by {key.split('_')[0]}:")
        for name, pct in profile[key]:
            print(f"    {pct:5.1f}  {name}")


if __name__ == "__main__":
    main()
