"""Redis Cluster figures for ``make bench``: the cluster column and the worker scaling run.

    .venv/bin/python bench/cluster.py [--runs 200] [--concurrency 50] [--workers 1,2,4]

Same production workload as the main grid (https fake model paced ``FRAME_MS`` per frame, a
new client connection per run). Two parts:

- column: ``agentloop serve`` (embedded worker) on one redis-server vs on a 3-master,
  3-replica Redis Cluster (``AGENTLOOP_REDIS_CLUSTER=true``): runs/s, the service's CPU per run
  and Redis's CPU per run (every node's, replicas included: replication is part of the cost);
  then the cluster under a burst (``--burst`` runs at once, the load of the ``--processes``
  run), where every run must still succeed (it once failed 19 % of them with 503).
- scaling: ``agentloop serve --no-worker`` plus 1, 2 and 4 ``agentloop worker`` processes on
  the cluster: runs/s and CPU per run. On a 2-core machine this shows the per-run cost of
  spreading work over processes and whether runs/s holds, not a speed-up: the client, the
  fake model, the API, the workers and six redis-servers share the same two cores.

Prints one JSON line per cell on stdout (the harness adds them to its results).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _systems
from bench._live import FRAME_MS
from bench._procs import (
    OUT,
    ROOT,
    Proc,
    free_port,
    start,
    start_fake,
    start_redis,
    tree_cpu_s,
    wait_http,
)
from bench._stats import client_cpu_s, load_avg
from bench._tls import make_tls
from bench._workload import RUN_FNS, drive
from tests.support.redis_cluster import RedisCluster


def _env(fake: Proc, url: str, cluster: bool) -> dict[str, str]:
    return _systems.agentloop_env(fake) | {
        "AGENTLOOP_REDIS_URL": url, "AGENTLOOP_REDIS_CLUSTER": "true" if cluster else "false"}


def start_service(fake: Proc, url: str, *, cluster: bool, workers: int) -> Proc:
    """``serve`` with its embedded worker (``workers`` 0), else ``serve --no-worker`` and
    ``workers`` worker processes (in ``extra``, so their CPU counts as the service's)."""
    env = _env(fake, url, cluster)
    port = free_port()
    argv = _systems.agentloop_argv(port) + (["--no-worker"] if workers else [])
    api = start("agentloop-cluster" if cluster else "agentloop-redis1", argv, port, env=env,
                cwd=ROOT)
    for n in range(workers):
        api.extra.append(start(f"agentloop-worker{n}", [str(ROOT / ".venv/bin/agentloop"),
                                                         "worker"], free_port(),
                               env=env | {"AGENTLOOP_WORKER_NAME": f"bench-w{n}"}, cwd=ROOT))
    try:
        wait_http(api, "/healthz", 60)
    except Exception:
        api.stop()
        raise
    return api


def measure(label: str, api: Proc, redis_pids: list[int], fake: Proc, runs: int,
            concurrency: int) -> dict[str, Any]:
    """Warm up, then ``runs`` at ``concurrency``: runs/s and CPU per run."""
    run_fn = RUN_FNS["agentloop"]
    asyncio.run(drive(run_fn, api.port, 10, 10, fresh=True))
    load = load_avg()
    before = (api.cpu_s(), sum(tree_cpu_s(p) for p in redis_pids), client_cpu_s())
    work = asyncio.run(drive(run_fn, api.port, runs, concurrency, fresh=True))
    after = (api.cpu_s(), sum(tree_cpu_s(p) for p in redis_pids), client_cpu_s())
    ok = sum(1 for r in work.records if r.ok)
    n = max(1, len(work.records))
    return {"figure": "cluster", "cell": label, "runs": len(work.records), "ok": ok,
            "runs_per_s": round(ok / work.wall_s, 2) if work.wall_s else None,
            "service_cpu_ms_per_run": round((after[0] - before[0]) / n * 1000, 2),
            "redis_cpu_ms_per_run": round((after[1] - before[1]) / n * 1000, 2),
            "client_cpu_ms_per_run": round((after[2] - before[2]) / n * 1000, 2),
            "concurrency": concurrency, "load_before": load, "load_after": load_avg()}


def _cell(label: str, fake: Proc, url: str, redis_pids: list[int], args: argparse.Namespace,
          *, cluster: bool, workers: int, concurrency: int | None = None) -> dict[str, Any]:
    try:
        api = start_service(fake, url, cluster=cluster, workers=workers)
    except Exception as exc:
        return {"figure": "cluster", "cell": label, "failed": f"{type(exc).__name__}: {exc}"}
    try:
        if concurrency is None:
            cell = measure(label, api, redis_pids, fake, args.runs, args.concurrency)
        else:  # a burst: three waves of that many runs at once
            cell = measure(label, api, redis_pids, fake, 3 * concurrency, concurrency)
    except Exception as exc:
        cell = {"figure": "cluster", "cell": label, "failed": f"{type(exc).__name__}: {exc}"}
    finally:
        api.stop()
    print(json.dumps(cell), flush=True)
    return cell


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The column (single redis vs cluster, embedded worker), then the scaling run."""
    fake = start_fake(FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_cluster")
    single = start_redis()
    cluster = RedisCluster()
    cells: list[dict[str, Any]] = []
    try:
        cluster.start()
        pids = [p.pid for p in cluster.procs.values()]
        single_url = f"redis://127.0.0.1:{single.port}/0"
        cells.append(_cell("redis", fake, single_url, [single.popen.pid], args, cluster=False,
                           workers=0))
        cells.append(_cell("cluster", fake, cluster.url, pids, args, cluster=True, workers=0))
        if args.burst:
            cluster.flush()
            cells.append(_cell(f"cluster C={args.burst}", fake, cluster.url, pids, args,
                               cluster=True, workers=0, concurrency=args.burst))
        for workers in args.workers:
            cluster.flush()
            cells.append(_cell(f"cluster/{workers}w", fake, cluster.url, pids, args,
                               cluster=True, workers=workers))
    finally:
        cluster.cleanup()
        single.stop()
        fake.stop()
    return cells


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--workers", default="1,2,4", help="worker processes per scaling cell")
    p.add_argument("--burst", type=int, default=300,
                   help="runs at once in the burst cell (3 × that many runs; 0: none)")
    args = p.parse_args(argv)
    args.workers = [int(w) for w in args.workers.split(",") if w]
    return args


if __name__ == "__main__":
    run(parse())
