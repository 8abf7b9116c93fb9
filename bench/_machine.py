"""Every core: ``agentloop serve --processes N`` (Redis) at N = 1 and N = 2 on this machine.

Issue 33: one process is one event loop on one core; ``--processes N`` runs N of them on the
port (SO_REUSEPORT), each with its embedded worker. Two figures, each at N = 1 and N = 2:

- throughput: runs/s at saturation on the production path (the paced https fake model, a new
  client connection per run, driven from ``client_procs`` client processes by
  ``_workload.drive_split``) at a concurrency high enough that one process is the bottleneck;
  with it the server CPU per run and the first event p50/p99. Cells alternate N = 1, 2 / 2, 1
  round by round, each on a fresh service (and redis-server), warmed up first.
- live streams: ``_live.run_steps`` on a fresh service, sizes growing until the lag p99
  misses 100 ms (or every process saturates): the largest size sustained.

Beside each figure: where the machine's cores went over the measured window (the service's
processes, its redis-server, the client processes, the fake model), because on a small
machine they all share the same cores and N = 2 cannot reach 2× there. The service's CPU is
its process tree's (``Proc.cpu_s``: the supervisor and every child). Each process's embedded
worker takes up to ``WORKER_CONCURRENCY`` runs at once, so the worker's default cap (100)
does not hold N = 1 below saturation where N = 2 has twice the slots.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _live
from bench._procs import OUT, Proc, machine_busy_s, start_fake
from bench._stats import Sample, load_avg, row
from bench._systems import start_agentloop
from bench._tls import make_tls
from bench._workload import RUN_FNS, drive, drive_split

SYSTEM = "agentloop-redis"
PROCESSES = (1, 2)
CONCURRENCY = 300
"""A paced run lasts ~1.45 s unloaded, so C runs at once cap runs/s near C / 1.45 s whatever
the service does: at C=200 (~138/s) that cap is about what one saturated process reaches on
the 2-core machine these figures come from, and N=2 would meet the client's cap rather than
the cores; C=300 (~200/s) leaves room above both."""
RUNS = 3000
"""≥ 20 s per cell at up to ~150 runs/s."""
LIVE_SIZES = [200, 400, 600, 800, 1000, 1200, 1400, 1600]
WORKER_CONCURRENCY = "5000"
READY_S = 60.0
Say = Callable[[str], None]


def listening(port: int) -> int:
    """TCP sockets in LISTEN on ``port`` (each ``serve --processes`` child listens on its own
    SO_REUSEPORT socket once it serves, so N of them mean every child takes connections)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def start_service(fake: Proc, processes: int, name: str) -> Proc:
    """``serve --processes N`` on a fresh redis-server, returned once all N children listen."""
    server = start_agentloop(fake, redis=True, processes=processes, name=name,
                             extra_env={"AGENTLOOP_WORKER_CONCURRENCY": WORKER_CONCURRENCY})
    deadline = time.monotonic() + READY_S
    while listening(server.port) < processes:
        if time.monotonic() > deadline or server.popen.poll() is not None:
            server.stop()
            raise RuntimeError(f"{name}: {listening(server.port)} of {processes} processes "
                               f"listening after {READY_S}s:\n{server.log_tail()}")
        time.sleep(0.1)
    return server


def _cores(before: Sample, after: Sample, busy: float, span: float) -> dict[str, float]:
    """Cores each party used over the cell (CPU seconds per second); ``machine``: every
    process on the machine, other users' included (``busy`` CPU seconds)."""
    redis = after.redis - before.redis
    parts = {"agentloop": after.server - before.server - redis, "redis": redis,
             "client": after.client - before.client, "fake": after.fake - before.fake}
    out = {k: round(v / span, 3) for k, v in parts.items()}
    return out | {"sum": round(sum(parts.values()) / span, 3), "machine": round(busy / span, 3)}


def throughput_cell(fake: Proc, processes: int, runs: int, concurrency: int, warmup: int,
                    client_procs: int) -> dict[str, Any]:
    """One throughput cell: fresh service, warm-up, ``runs`` at ``concurrency``."""
    load = load_avg()
    server = start_service(fake, processes, f"agentloop-p{processes}")
    try:
        if warmup:
            asyncio.run(drive(RUN_FNS[SYSTEM], server.port, warmup, min(concurrency, warmup)))
        before, busy0, t0 = Sample.take(server, fake), machine_busy_s(), time.monotonic()
        work = drive_split(SYSTEM, server.port, runs, concurrency, procs=client_procs)
        after, busy1, t1 = Sample.take(server, fake), machine_busy_s(), time.monotonic()
        cores = _cores(before, after, busy1 - busy0, t1 - t0)
        return row(SYSTEM, concurrency, work, before, after, server) | {
            "processes": processes, "client_procs": client_procs, "load_before": load,
            "cores": cores, "util_per_process": round(cores["agentloop"] / processes, 3)}
    finally:
        server.stop()


def live_cell(fake: Proc, processes: int, sizes: list[int], say: Say) -> dict[str, Any]:
    """Live streams on a fresh ``serve --processes N``: the steps and the sustained size."""
    server = start_service(fake, processes, f"agentloop-p{processes}-live")
    try:
        steps = _live.run_steps(server, sizes, say=say, fake=fake, processes=processes)
    finally:
        server.stop()
    return {"processes": processes, "steps": steps, "sustained": _live.sustained(steps)}


def _failed(processes: int, exc: Exception) -> dict[str, Any]:
    return {"processes": processes, "failed": f"{type(exc).__name__}: {exc}"[:2000]}


def run(*, runs: int = RUNS, concurrency: int = CONCURRENCY, sizes: list[int] | None = None,
        warmup: int = 20, client_procs: int = 2, rounds: int = 1,
        processes: tuple[int, ...] = PROCESSES, say: Say = print) -> dict[str, Any]:
    """Throughput cells (``rounds``, the order of N alternating), then live steps per N."""
    fake = start_fake(_live.FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_machine")
    cells: list[dict[str, Any]] = []
    lives: list[dict[str, Any]] = []
    try:
        for rnd in range(rounds):
            for n in processes if rnd % 2 == 0 else processes[::-1]:
                say(f"processes={n}: {runs} runs at C={concurrency} (load {load_avg()})")
                try:
                    cell = throughput_cell(fake, n, runs, concurrency, warmup, client_procs)
                except Exception as exc:
                    cell = _failed(n, exc)
                say(f"  {cell.get('runs_per_s')} runs/s, cores {cell.get('cores')}")
                cells.append(cell | {"round": rnd + 1})
        for n in processes:
            say(f"processes={n}: live streams {sizes or LIVE_SIZES}")
            try:
                lives.append(live_cell(fake, n, sizes or LIVE_SIZES, say))
            except Exception as exc:
                lives.append(_failed(n, exc))
    finally:
        fake.stop()
    fig = {"figure": "machine", "system": SYSTEM, "nproc": os.cpu_count(),
           "concurrency": concurrency, "client_procs": client_procs,
           "worker_concurrency": int(WORKER_CONCURRENCY), "throughput": cells, "live": lives}
    return fig | {"scaling": scaling(fig)}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def runs_per_s(fig: dict[str, Any], processes: int) -> float | None:
    return _median([c["runs_per_s"] for c in fig.get("throughput", [])
                    if c.get("processes") == processes and c.get("runs_per_s") is not None])


def sustained_streams(fig: dict[str, Any], processes: int) -> int | None:
    for live in fig.get("live", []):
        if live.get("processes") == processes and (held := live.get("sustained")):
            return int(held["streams"])
    return None


def scaling(fig: dict[str, Any]) -> dict[str, Any]:
    """N=2 / N=1: runs/s (medians over rounds) and the largest sustained live size."""
    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a is not None and b else None

    r1, r2 = runs_per_s(fig, 1), runs_per_s(fig, 2)
    s1, s2 = sustained_streams(fig, 1), sustained_streams(fig, 2)
    return {"runs_per_s": {"1": r1, "2": r2, "ratio": ratio(r2, r1)},
            "live_streams": {"1": s1, "2": s2, "ratio": ratio(s2, s1)}}


def _fmt(values: list[float]) -> str:
    """Median, with the range when there are several rounds."""
    if not values:
        return "–"
    mid = f"{statistics.median(values):.4g}"
    return mid if len(values) == 1 else f"{mid} ({min(values):.4g}–{max(values):.4g})"


def _col(cells: list[dict[str, Any]], key: str, sub: str | None = None) -> str:
    values = []
    for c in cells:
        v = c.get(key)
        v = v.get(sub) if sub is not None and isinstance(v, dict) else v
        if isinstance(v, int | float):
            values.append(float(v))
    return _fmt(values)


def _x(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _n(value: float | None) -> str:
    return "none" if value is None else f"{value:g}"


THROUGHPUT_HEAD = (
    "| processes | C | ok/runs | rounds | runs/s | server CPU ms/run | of which redis | "
    "first event p50 ms | first event p99 ms | end p50 ms | agentloop util per process | "
    "cores: agentloop "
    "| redis | client | fake model | these four | whole machine | load avg |")
LIVE_HEAD = (
    "| processes | streams | live | frames/s | lag p50 / p99 / max ms | server util | "
    "server µs/frame | redis util | client util | fake model util | whole machine | "
    "load avg |")


def _throughput_rows(fig: dict[str, Any]) -> list[str]:
    out = [THROUGHPUT_HEAD, "|---|---|---|---|" + "---|" * 14]
    for n in sorted({c["processes"] for c in fig.get("throughput", [])}):
        mine = [c for c in fig["throughput"] if c["processes"] == n and "failed" not in c]
        out += [f"| {n} | failed: `{c['failed'][:300]}` |" for c in fig["throughput"]
                if c["processes"] == n and "failed" in c]
        if not mine:
            continue
        ok, runs = sum(c["ok"] for c in mine), sum(c["runs"] for c in mine)
        out.append(f"| {n} | {mine[0]['concurrency']} | {ok}/{runs} | {len(mine)} | "
                   + " | ".join(_col(mine, k, s) for k, s in (
                       ("runs_per_s", None), ("server_cpu_ms_per_run", None),
                       ("redis_cpu_ms_per_run", None), ("first_event_ms", "p50"),
                       ("first_event_ms", "p99"), ("end_ms", "p50"),
                       ("util_per_process", None),
                       ("cores", "agentloop"), ("cores", "redis"), ("cores", "client"),
                       ("cores", "fake"), ("cores", "sum"), ("cores", "machine")))
                   + f" | {', '.join(str(c.get('load_before')) for c in mine)} |")
    return out


def _live_rows(fig: dict[str, Any]) -> list[str]:
    out = [LIVE_HEAD, "|---|" + "---|" * 11]
    for live in fig.get("live", []):
        n = live["processes"]
        if "failed" in live:
            out.append(f"| {n} | failed: `{live['failed'][:300]}` |")
            continue
        for s in live["steps"]:
            lag = s["lag_ms"]
            out.append(f"| {n} | {s['streams']} | {s['live']} | {s['frames_per_s']} | "
                       f"{lag['p50']} / {lag['p99']} / {lag['max']} | {s['server_cpu_util']} | "
                       f"{s['server_us_per_frame']} | {s.get('redis_cpu_util')} | "
                       f"{s.get('client_cpu_util', '–')} | {s.get('fake_cpu_util', '–')} | "
                       f"{s.get('machine_busy', '–')} | {s['load_avg']} |")
    return out


def render(fig: dict[str, Any] | None) -> list[str]:
    """The report's section: both tables, the scaling factors and what bounds them here."""
    if not fig:
        return []
    sc = fig.get("scaling") or scaling(fig)
    rps, live = sc["runs_per_s"], sc["live_streams"]
    nproc = fig.get("nproc")
    return [
        "## Every core: `serve --processes N`", "",
        f"`{fig['system']}` served by `agentloop serve --processes N` (a supervisor, N API "
        "processes on one port with SO_REUSEPORT, each with its embedded worker taking up to "
        f"{fig.get('worker_concurrency')} runs at once), N = 1 and N = 2, each cell on a fresh "
        "service and redis-server (`bench/_machine.py`). **Throughput**: the production path "
        f"at C={fig.get('concurrency')} (a new connection per run, driven from "
        f"{fig.get('client_procs')} client processes), high enough that one process saturates: "
        "a run lasts ~1.45 s unloaded, so C runs at once allow up to C / 1.45 s runs/s, and an "
        "\"end p50\" well above 1.45 s means runs waited on the service. Cells alternate "
        "N = 1, 2 / 2, 1 by round, figures are medians over the rounds. "
        "**Live streams**: the steps of the live-streams section against the same service, "
        "sizes growing until lag p99 > 100 ms. Server CPU is the process tree's (the supervisor "
        "and every child, redis-server added for \"server CPU ms/run\"); \"cores\" is CPU "
        "seconds per second over the measured window for each party on the machine.", "",
        f"**Scaling N=2 / N=1: runs/s {_x(rps['ratio'])}** ({_n(rps['1'])} → "
        f"{_n(rps['2'])}), **live streams sustained {_x(live['ratio'])}** ({_n(live['1'])} → "
        f"{_n(live['2'])}).", "",
        f"This machine has {nproc} cores, shared by the service's processes, its "
        "redis-server, the client processes and the fake model, so N = 2 cannot reach 2× "
        "here: the \"cores\" columns (throughput) and the client and fake model utilisation "
        "(live) show where the cores went, and \"whole machine\" the cores every process used "
        "(other work on the machine included; at most the core count). On a host where the "
        "clients and the model are elsewhere, each process brings its own core.", "",
        "Throughput (production path, runs/s at saturation):", "", *_throughput_rows(fig), "",
        "Live streams (one client process reads every stream; util = cores):", "",
        *_live_rows(fig), ""]


def summary(fig: dict[str, Any]) -> str:
    sc = fig.get("scaling") or scaling(fig)
    rps, live = sc["runs_per_s"], sc["live_streams"]
    return (f"serve --processes: runs/s {_n(rps['1'])} → {_n(rps['2'])} "
            f"({_x(rps['ratio'])}), live streams sustained {_n(live['1'])} → {_n(live['2'])} "
            f"({_x(live['ratio'])}) on "
            f"{fig.get('nproc')} cores shared with the client and the fake model")
