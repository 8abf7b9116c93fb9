"""agentloop against LangGraph Server, side by side in one invocation, on one fake LLM.

    .venv/bin/python bench/harness.py [--runs 200] [--concurrency 20,50]
        [--systems agentloop,agentloop-redis,langgraph] [--skip-peer] [--quick]

For each concurrency, each system in turn is started fresh (agentloop on the memory backend,
agentloop on a throw-away redis-server, ``langgraph dev``), warmed up, then driven through
``--runs`` runs over HTTP + SSE by one lean client process; then agentloop alone: steer→injected
latency on a slow model and memory with 1,000 open runs. Prints one JSON line per measured cell
on stdout, writes bench/RESULTS.md (figures, agentloop/LangGraph ratios, PASS/MISS per target).
Every server binds 127.0.0.1; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _agentloop_only, _open_runs, _report, _systems
from bench._procs import Proc, start_fake
from bench._stats import Sample, row
from bench._workload import RUN_FNS, drive


def _say(msg: str) -> None:
    """Progress on stderr: stdout carries only the JSON lines."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def measure_cell(system: str, fake: Proc, runs: int, concurrency: int, warmup: int,
                 peer_jobs: int) -> dict[str, Any]:
    """Start ``system`` fresh, warm it up, measure ``runs`` at ``concurrency``, stop it."""
    server = _systems.start_system(system, fake, peer_jobs)
    try:
        run_fn = RUN_FNS[system]
        if warmup:
            asyncio.run(drive(run_fn, server.port, warmup, min(concurrency, warmup)))
        before = Sample.take(server, fake)
        work = asyncio.run(drive(run_fn, server.port, runs, concurrency))
        after = Sample.take(server, fake)
        return row(system, concurrency, work, before, after, server)
    finally:
        server.stop()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--concurrency", default="20,50", help="comma-separated list")
    p.add_argument("--systems", default=",".join(_systems.SYSTEMS))
    p.add_argument("--skip-peer", action="store_true", help="leave LangGraph out")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 40 runs at C=20, 20 steers, 200 open runs")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--peer-jobs", type=int, default=_systems.PEER_JOBS_PER_WORKER,
                   help="langgraph dev --n-jobs-per-worker")
    p.add_argument("--steer-runs", type=int, default=50)
    p.add_argument("--open-runs", type=int, default=1000)
    p.add_argument("--skip-steer", action="store_true")
    p.add_argument("--skip-open", action="store_true")
    p.add_argument("--results", type=Path, default=_report.RESULTS,
                   help="where the Markdown report goes ('-' for nowhere)")
    args = p.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    for s in args.systems:
        if s not in _systems.SYSTEMS:
            p.error(f"unknown system {s!r}; known: {', '.join(_systems.SYSTEMS)}")
    if args.skip_peer:
        args.systems = [s for s in args.systems if s != "langgraph"]
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    if args.quick:
        args.runs, args.concurrency, args.warmup = 40, [20], 10
        args.steer_runs, args.open_runs = 20, 200
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    _raise_nofile()
    if "langgraph" in args.systems:
        _say("installing the peer into bench/.peer/venv (once)")
        _systems.ensure_peer()
    rows: list[dict[str, Any]] = []
    extras: dict[str, Any] = {}
    fake = start_fake()
    try:
        for concurrency in args.concurrency:
            for system in args.systems:
                _say(f"{system}: {args.runs} runs at C={concurrency}")
                try:
                    cell = measure_cell(system, fake, args.runs, concurrency, args.warmup,
                                        args.peer_jobs)
                except Exception as exc:
                    cell = {"system": system, "concurrency": concurrency,
                            "failed": f"{type(exc).__name__}: {exc}"[:2000]}
                print(json.dumps(cell), flush=True)
                rows.append(cell)
    finally:
        fake.stop()
    for system in (s for s in args.systems if s in _systems.AGENTLOOP_SYSTEMS):
        if not args.skip_steer:
            _say(f"{system}: steer→injected over {args.steer_runs} runs")
            extras[f"steer/{system}"] = _agentloop_only.steer(system, args.steer_runs)
            print(json.dumps(extras[f"steer/{system}"]), flush=True)
        if not args.skip_open:
            _say(f"{system}: {args.open_runs} concurrent open runs")
            extras[f"open/{system}"] = _open_runs.open_runs(system, args.open_runs)
            print(json.dumps(extras[f"open/{system}"]), flush=True)
    if str(args.results) != "-":
        _report.write(args.results, rows, extras, sys.argv[1:] if argv is None else argv)
        _say(f"wrote {args.results}")
    for line in _report.verdicts(rows, extras):
        _say(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
