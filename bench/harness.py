"""agentloop against LangGraph Server, side by side in one invocation, on one fake model.

    .venv/bin/python bench/harness.py [--quick] [--runs 200] [--concurrency 50] [--repeat 3]
        [--systems agentloop,agentloop-redis,langgraph,relay-floor] [--skip-peer]
        [--skip-micro]
        [--skip-live] [--skip-steer] [--skip-open] [--skip-cluster] [--skip-machine]

The production path first (the default workload): the fake model serves ``https://`` with a
certificate from a throw-away CA that every system trusts through ``SSL_CERT_FILE``, paces its
replies one frame per token ``FRAME_MS`` apart (tool-call arguments in fragments), and every
run opens a new client connection, as distinct browsers do. ``relay-floor`` beside them is
``bench/relay_floor.py`` doing the same run with nothing but the relaying (the least any Python
server spends on it). Systems are interleaved run by run
(A B C A B C …, each started fresh per cell and warmed up) and each figure is the median of
``--repeat`` cells, its range and the load average printed beside it. Then every core of the
machine: ``agentloop serve --processes 1`` and ``2`` (Redis), runs/s at saturation and live
streams sustained, with the scaling factor (``bench/_machine.py``). Then the labelled
micro-benchmark (plain ``http://``, each reply in one write, keep-alive client connections),
live streams per core on each backend (with a py-spy profile), steer→injected latency and memory
with 1,000 open runs, and the Redis Cluster column and worker scaling (``bench/cluster.py``).
Prints one JSON line per measured cell on stdout and writes
bench/RESULTS.md (figures, ratios, PASS/MISS per target). Every server binds 127.0.0.1; every loop
is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import (
    _agentloop_only,
    _live,
    _machine,
    _open_runs,
    _profile,
    _report,
    _systems,
    cluster,
    relay_floor,
)
from bench._procs import OUT, Proc, start_fake
from bench._stats import Sample, load_avg, row
from bench._tls import make_tls
from bench._workload import RUN_FNS, drive, drive_split

FRAME_MS = _live.FRAME_MS
LIVE_SIZES = [100, 200, 300, 400, 500, 600, 800, 1000]
PROFILE_STREAMS = 200
RAW = OUT / "results.json"
"""Every figure of the last run, as measured (``--render`` writes the report from it)."""


def raw_path(results: Path) -> Path:
    """Where a run keeps its figures for ``--render``: ``bench/out/results.json`` beside the
    default report, else next to the report asked for (``--results /tmp/x.md`` →
    ``/tmp/x.json``), so a partial run written elsewhere leaves the default report's figures
    alone."""
    if str(results) in ("-", str(_report.RESULTS)) or results.resolve() == _report.RESULTS:
        return RAW
    return results.with_suffix(".json")


def _say(msg: str) -> None:
    """Progress on stderr: stdout carries only the JSON lines."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def measure_cell(system: str, fake: Proc, runs: int, concurrency: int, warmup: int,
                 peer_jobs: int, *, fresh: bool, client_procs: int = 1,
                 start: Callable[[], Proc] | None = None) -> dict[str, Any]:
    """Start ``system`` fresh (with ``start`` when given: another tree, other settings), warm
    it up, measure ``runs`` at ``concurrency`` from ``client_procs`` client processes, stop
    it."""
    load = load_avg()
    server = start() if start is not None else _systems.start_system(system, fake, peer_jobs)
    try:
        run_fn = RUN_FNS[system]
        if warmup:
            asyncio.run(drive(run_fn, server.port, warmup, min(concurrency, warmup), fresh=fresh))
        before = Sample.take(server, fake)
        work = drive_split(system, server.port, runs, concurrency, procs=client_procs,
                           fresh=fresh)
        after = Sample.take(server, fake)
        return row(system, concurrency, work, before, after, server) | {
            "load_before": load, "client_procs": client_procs}
    finally:
        server.stop()


def _cell(system: str, fake: Proc, args: argparse.Namespace, concurrency: int, *,
          fresh: bool, label: str) -> dict[str, Any]:
    _say(f"{label}: {system}, {args.runs} runs at C={concurrency} (load {load_avg()})")
    # paced runs last seconds: LangGraph runs as many at once as the clients ask for; the
    # micro-benchmark keeps the job count that measured best there
    jobs = args.peer_jobs or (concurrency if fresh else _systems.PEER_JOBS_PER_WORKER)
    try:
        procs = args.client_procs if fresh else 1
        cell = measure_cell(system, fake, args.runs, concurrency, args.warmup, jobs,
                            fresh=fresh, client_procs=procs)
        cell |= {"peer_jobs": jobs} if system == "langgraph" else {}
    except Exception as exc:
        cell = {"system": system, "concurrency": concurrency,
                "failed": f"{type(exc).__name__}: {exc}"[:2000]}
    cell["workload"] = label
    print(json.dumps(cell), flush=True)
    return cell


def production(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The production-path cells, systems interleaved, ``--repeat`` rounds."""
    fake = start_fake(FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_https")
    cells = []
    try:
        for rnd in range(args.repeat):
            for concurrency in args.concurrency:
                for system in args.systems:
                    cells.append(_cell(system, fake, args, concurrency, fresh=True,
                                       label="production") | {"round": rnd + 1})
    finally:
        fake.stop()
    return cells


def micro(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The micro-benchmark: plain http, replies in one write, keep-alive client connections."""
    fake = start_fake()
    try:
        return [_cell(system, fake, args, max(args.concurrency), fresh=False, label="micro")
                for system in args.systems if system != _systems.FLOOR]
    finally:
        fake.stop()


def live(system: str, sizes: list[int], profile_seconds: float) -> dict[str, Any]:
    """Live streams per core on ``system``: the steps, the sustained size, a profile."""
    fake = start_fake(FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_live")
    server: Proc | None = None
    try:
        server = _systems.start_agentloop(fake, redis=system == "agentloop-redis",
                                          name=f"{system}-live", extra_env={
                                              "AGENTLOOP_WORKER_CONCURRENCY": "5000"})
        steps = _live.run_steps(server, sizes, say=_say)
        out: dict[str, Any] = {"figure": "live", "system": system, "steps": steps,
                               "sustained": _live.sustained(steps)}
        if profile_seconds:
            out["profile"] = _profiled_step(server, min(PROFILE_STREAMS, max(sizes)),
                                            profile_seconds)
        return out
    except Exception as exc:
        return {"figure": "live", "system": system, "failed": f"{type(exc).__name__}: {exc}"}
    finally:
        if server is not None:
            server.stop()
        fake.stop()


def floor(sizes: list[int]) -> dict[str, Any]:
    """The same live steps on ``bench/relay_floor.py``: what relaying a frame costs at least."""
    fake = start_fake(FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_floor")
    server: Proc | None = None
    try:
        server = relay_floor.start_relay(fake)
        steps = _live.run_steps(server, sizes, say=_say)
        return {"figure": "live", "system": "relay-floor", "steps": steps,
                "sustained": _live.sustained(steps)}
    except Exception as exc:
        return {"figure": "live", "system": "relay-floor",
                "failed": f"{type(exc).__name__}: {exc}"}
    finally:
        if server is not None:
            server.stop()
        fake.stop()


def transports(quick: bool) -> dict[str, Any]:
    """``bench/transports.py`` in its own process (on uvloop, as the service runs)."""
    argv = [sys.executable, str(Path(__file__).with_name("transports.py"))]
    argv += ["--calls", "100", "--rounds", "1"] if quick else []
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, ValueError, IndexError) as exc:
        return {"failed": f"{type(exc).__name__}: {exc}"[:500]}


def _profiled_step(server: Proc, n: int, seconds: float) -> dict[str, Any]:
    """One more step of ``n`` streams with py-spy sampling the server meanwhile."""
    result: dict[str, Any] = {}

    async def go() -> dict[str, Any]:
        task = asyncio.create_task(_live.step(server, n))
        await asyncio.sleep(_live.RAMP_S + _live.SETTLE_S)
        result.update(await asyncio.to_thread(_profile.record, server.popen.pid, seconds))
        return await task

    figures = asyncio.run(go())
    return {"streams": n, "seconds": seconds, "server_us_per_frame":
            figures["server_us_per_frame"]} | result


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--concurrency", default="50", help="comma-separated list")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds per cell")
    p.add_argument("--systems", default=",".join(_systems.SYSTEMS))
    p.add_argument("--skip-peer", action="store_true", help="leave LangGraph out")
    p.add_argument("--quick", action="store_true", help="smaller runs: a few minutes in all")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--client-procs", type=int, default=2,
                   help="client processes driving the production path (its runs split "
                        "between them)")
    p.add_argument("--peer-jobs", type=int, default=0,
                   help="langgraph dev --n-jobs-per-worker (default: C on the production path, "
                   f"{_systems.PEER_JOBS_PER_WORKER} on the micro-benchmark)")
    p.add_argument("--steer-runs", type=int, default=50)
    p.add_argument("--open-runs", type=int, default=1000)
    p.add_argument("--live-sizes", default=",".join(map(str, LIVE_SIZES)))
    p.add_argument("--profile-seconds", type=float, default=5.0)
    p.add_argument("--machine-runs", type=int, default=_machine.RUNS,
                   help="runs per serve --processes throughput cell")
    p.add_argument("--machine-concurrency", type=int, default=_machine.CONCURRENCY)
    p.add_argument("--machine-sizes", default=",".join(map(str, _machine.LIVE_SIZES)),
                   help="live-stream steps at serve --processes 1 and 2")
    for skip in ("micro", "transports", "cluster", "live", "steer", "open", "machine"):
        p.add_argument(f"--skip-{skip}", action="store_true")
    p.add_argument("--results", type=Path, default=_report.RESULTS,
                   help="where the Markdown report goes ('-' for nowhere)")
    p.add_argument("--render", action="store_true",
                   help=f"only write the report again from the last run's {RAW.name} "
                   "(e.g. after editing bench/NOTES.md)")
    args = p.parse_args(argv)
    if args.quick or os.environ.get("BENCH_QUICK") == "1":
        args.quick = True
        args.runs, args.repeat, args.warmup = 100, 1, 10
        args.steer_runs, args.open_runs = 20, 200
        args.live_sizes = "200,400,600"
        args.machine_runs, args.machine_sizes = 600, "200,400,600,800,1000"
    args.systems = [s for s in args.systems.split(",") if s]
    for s in args.systems:
        if s not in _systems.SYSTEMS:
            p.error(f"unknown system {s!r}; known: {', '.join(_systems.SYSTEMS)}")
    if args.skip_peer:
        args.systems = [s for s in args.systems if s != "langgraph"]
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.live_sizes = [int(n) for n in args.live_sizes.split(",") if n]
    args.machine_sizes = [int(n) for n in args.machine_sizes.split(",") if n]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    raw = raw_path(args.results)
    if args.render:
        saved = json.loads(raw.read_text())
        _report.write(args.results, saved["rows"], saved["extras"], saved["argv"],
                      quick=saved["quick"], measured=saved.get("measured"))
        _say(f"wrote {args.results} from {raw}")
        return 0
    measured = _report.measured_now()
    _raise_nofile()
    if "langgraph" in args.systems:
        _say("installing the peer into bench/.peer/venv (once)")
        _systems.ensure_peer()
    rows = production(args)
    extras: dict[str, Any] = {}
    if not args.skip_machine:
        _say("every core: serve --processes 1 and 2")
        extras["machine"] = _machine.run(
            runs=args.machine_runs, concurrency=args.machine_concurrency,
            sizes=args.machine_sizes, warmup=args.warmup, client_procs=args.client_procs,
            rounds=args.repeat, say=_say)
        print(json.dumps(extras["machine"]), flush=True)
    if not args.skip_micro:
        rows += micro(args)
    if not args.skip_transports:
        _say("https transports: client CPU per streamed call")
        extras["transports"] = transports(args.quick)
        print(json.dumps(extras["transports"]), flush=True)
    if not args.skip_cluster:
        _say("Redis Cluster: one redis-server vs 3+3 cluster, then 1, 2, 4 worker processes")
        extras["cluster"] = cluster.run(cluster.parse(
            ["--runs", str(args.runs), "--concurrency", str(max(args.concurrency))]))
    for system in (s for s in args.systems if s in _systems.AGENTLOOP_SYSTEMS):
        if not args.skip_live:
            _say(f"{system}: live streams per core")
            extras[f"live/{system}"] = live(system, args.live_sizes, args.profile_seconds)
            print(json.dumps(extras[f"live/{system}"]), flush=True)
        if not args.skip_steer:
            _say(f"{system}: steer→injected over {args.steer_runs} runs")
            extras[f"steer/{system}"] = _agentloop_only.steer(system, args.steer_runs)
            print(json.dumps(extras[f"steer/{system}"]), flush=True)
        if not args.skip_open:
            _say(f"{system}: {args.open_runs} concurrent open runs")
            extras[f"open/{system}"] = _open_runs.open_runs(system, args.open_runs)
            print(json.dumps(extras[f"open/{system}"]), flush=True)
    if not args.skip_live and any(s in _systems.AGENTLOOP_SYSTEMS for s in args.systems):
        _say("relay floor: the same live steps on bench/relay_floor.py")
        extras["live/relay-floor"] = floor(args.live_sizes)
        print(json.dumps(extras["live/relay-floor"]), flush=True)
    given = sys.argv[1:] if argv is None else argv
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps({"rows": rows, "extras": extras, "argv": given,
                               "quick": args.quick, "measured": measured}))
    if str(args.results) != "-":
        _report.write(args.results, rows, extras, given, quick=args.quick, measured=measured)
        _say(f"wrote {args.results}")
    for line in _report.verdicts(rows, extras):
        _say(line)
    if "machine" in extras:
        _say(_machine.summary(extras["machine"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
