"""The service with the Redis backend, one command, one JSON line: `python bench/service.py`.

A zero-latency fake model (``bench/fake_llm.py``: a streamed ``add`` call, then 40 text deltas)
behind the real service on loopback, with a throw-away redis-server. Figures:

- runs_per_s at 50 concurrent runs, each created over HTTP and read over SSE to the end
- first_event_ms p50/p99: from ``POST /runs`` to the first SSE event (``run_created``), and
  first_model_delta_ms: to the first streamed model delta
- sse_events_per_s delivered to the clients
- steer_ms p50/p99: steer → injected, at the loop's poll point (as bench/harness.py defines it)
- server_cpu_ms_per_run (the service's process tree; redis-server's apart)
- rss_kib_per_idle_run: resident memory per concurrent open run held by a slow model

The same building blocks as ``make bench`` (bench/harness.py), which also runs the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._agentloop_only import steer
from bench._open_runs import open_runs
from bench._procs import start_fake
from bench._stats import Sample, row
from bench._systems import start_agentloop
from bench._workload import agentloop_run, drive

SYSTEM = "agentloop-redis"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--open-runs", type=int, default=1000)
    parser.add_argument("--steer-runs", type=int, default=50)
    args = parser.parse_args()
    fake = start_fake()
    try:
        server = start_agentloop(fake, redis=True, name=SYSTEM)
        try:
            asyncio.run(drive(agentloop_run, server.port, 50, 25))  # warm up
            before = Sample.take(server, fake)
            work = asyncio.run(drive(agentloop_run, server.port, args.runs, args.concurrency))
            after = Sample.take(server, fake)
            cell = row(SYSTEM, args.concurrency, work, before, after, server)
        finally:
            server.stop()
    finally:
        fake.stop()
    steered = steer(SYSTEM, args.steer_runs)
    held = open_runs(SYSTEM, args.open_runs)
    delivered = sum(r.events for r in work.records if r.ok)
    print(json.dumps({
        "bench": "service", "backend": "redis", "concurrency": args.concurrency,
        "runs": cell["runs"], "ok": cell["ok"], "runs_per_s": cell["runs_per_s"],
        "first_event_ms": cell["first_event_ms"], "first_model_delta_ms": cell["first_delta_ms"],
        "end_ms": cell["end_ms"],
        "sse_events_per_s": round(delivered / work.wall_s, 1) if work.wall_s else None,
        "steer_ms": steered.get("steer_at_poll_ms"), "steer_raw_ms": steered.get("steer_raw_ms"),
        "server_cpu_ms_per_run": cell["server_cpu_ms_per_run"],
        "redis_cpu_ms_per_run": cell["redis_cpu_ms_per_run"],
        "rss_kib_per_idle_run": held.get("kib_per_run"), "open_runs_streaming": held.get(
            "streaming"), "open_runs": held.get("runs"), "open_runs_rss_mb": held.get("rss_mb"),
    }))


if __name__ == "__main__":
    main()
