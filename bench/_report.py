"""bench/RESULTS.md: the machine, the versions, the figures, agentloop/LangGraph ratios, targets."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._procs import ROOT
from bench._systems import peer_versions

RESULTS = ROOT / "bench" / "RESULTS.md"
COLUMNS = [("runs/s", "runs_per_s"), ("ok/runs", None),
           ("first event p50/p99 ms", "first_event_ms"),
           ("first delta p50/p99 ms", "first_delta_ms"), ("end p50/p99 ms", "end_ms"),
           ("events/run", "events_per_run"), ("LLM calls/run", "llm_calls_per_run"),
           ("server CPU ms/run", "server_cpu_ms_per_run"),
           ("of which redis", "redis_cpu_ms_per_run"),
           ("peak RSS MB", "peak_rss_mb"), ("client CPU ms/run", "client_cpu_ms_per_run"),
           ("fake LLM CPU ms/run", "fake_llm_cpu_ms_per_run")]


def machine() -> dict[str, str]:
    model = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {"nproc": str(os.cpu_count()), "cpu": model, "ram": f"{mem_kb / 1024 / 1024:.1f} GiB",
            "kernel": platform.release(), "python": platform.python_version()}


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "app", "providers",
                                "tool_registry"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return out + (" (with uncommitted changes in app/providers/tool_registry)" if dirty else "")


def _cell(row: dict[str, Any], key: str | None) -> str:
    if key is None:
        return f"{row['ok']}/{row['runs']}"
    value = row.get(key)
    if isinstance(value, dict):
        return f"{value['p50']} / {value['p99']}"
    return "–" if value is None else str(value)


def _ratio(a: Any, b: Any) -> str:
    numbers = isinstance(a, int | float) and isinstance(b, int | float)
    return f"{a / b:.2f}×" if numbers and b else "–"


def _find(rows: list[dict[str, Any]], system: str, c: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["system"] == system and r["concurrency"] == c
                 and "failed" not in r), None)


def verdicts(rows: list[dict[str, Any]], extras: dict[str, Any]) -> Iterator[str]:
    """PASS/MISS per target, or why it could not be judged."""
    def say(ok: bool | None, text: str) -> str:
        return f"{'n/a ' if ok is None else 'PASS' if ok else 'MISS'} {text}"

    for system in ("agentloop", "agentloop-redis"):
        peer, mine = _find(rows, "langgraph", 50), _find(rows, system, 50)
        if mine and peer:
            a, b = mine["server_cpu_ms_per_run"], peer["server_cpu_ms_per_run"]
            yield say(a * 10 <= b, f"{system}: server CPU/run {a} ms ≤ 1/10 of LangGraph's {b} ms"
                      f" (ratio {_ratio(a, b)}, C=50)")
            a, b = mine["runs_per_s"], peer["runs_per_s"]
            yield say(a >= 5 * b, f"{system}: runs/s {a} ≥ 5× LangGraph's {b} (ratio "
                      f"{_ratio(a, b)}, C=50)")
        else:
            yield say(None, f"{system} vs LangGraph at C=50: a cell is missing or failed")
        if mine:
            fe = mine["first_event_ms"]
            yield say(fe["p50"] is not None and fe["p50"] <= 20 and fe["p99"] <= 100,
                      f"{system}: first event p50 {fe['p50']} ms ≤ 20, p99 {fe['p99']} ms ≤ 100"
                      " (C=50)")
    st = extras.get("steer/agentloop-redis", {})
    p99 = st.get("steer_at_poll_ms", {}).get("p99")
    yield say(None if p99 is None else p99 <= 10 and st.get("ok") == st.get("runs"),
              f"agentloop-redis: steer→injected p99 {p99} ms ≤ 10 (at the loop's poll point; "
              f"{st.get('ok', 0)}/{st.get('runs', 0)} injected)")
    for system in ("agentloop", "agentloop-redis"):
        op = extras.get(f"open/{system}")
        if op is None:
            continue
        rss, live = op.get("rss_mb"), op.get("all_streaming")
        yield say(None if rss is None else rss <= 300 and bool(live) and op["runs"] >= 1000,
                  f"{system}: {op['runs']} open runs: RSS {rss} MB ≤ 300, all streaming: "
                  f"{live} ({op.get('streaming')}/{op['runs']})" + (
                      f" — failed: {op['failed'][:200]}" if "failed" in op else ""))


def _figures_table(rows: list[dict[str, Any]]) -> list[str]:
    good = [r for r in rows if "failed" not in r]
    out = ["| system | C | " + " | ".join(h for h, _ in COLUMNS) + " |",
           "|---|---|" + "---|" * len(COLUMNS)]
    out += [f"| {r['system']} | {r['concurrency']} | "
            + " | ".join(_cell(r, k) for _, k in COLUMNS) + " |" for r in good]
    out += [f"| {r['system']} | {r['concurrency']} | failed: `{r['failed'][:300]}` |"
            for r in rows if "failed" in r]
    return out


def _ratio_table(rows: list[dict[str, Any]]) -> list[str]:
    keys = [("runs/s", "runs_per_s", None), ("server CPU/run", "server_cpu_ms_per_run", None),
            ("first event p50", "first_event_ms", "p50"),
            ("first event p99", "first_event_ms", "p99"),
            ("end p50", "end_ms", "p50"), ("end p99", "end_ms", "p99"),
            ("peak RSS", "peak_rss_mb", None)]
    out = ["| system | C | " + " | ".join(k for k, _, _ in keys) + " |",
           "|---|---|" + "---|" * len(keys)]
    for r in rows:
        peer = _find(rows, "langgraph", r["concurrency"])
        if r["system"] == "langgraph" or "failed" in r or peer is None:
            continue
        cells = []
        for _, key, sub in keys:
            a, b = r.get(key), peer.get(key)
            if sub:
                a, b = a[sub] if a else None, b[sub] if b else None
            cells.append(_ratio(a, b))
        out.append(f"| {r['system']} / langgraph | {r['concurrency']} | "
                   + " | ".join(cells) + " |")
    return out


def write(path: Path, rows: list[dict[str, Any]], extras: dict[str, Any], argv: list[str]) -> None:
    m, versions = machine(), peer_versions()
    lines = ["# Benchmark results: agentloop and LangGraph Server, side by side", "",
             "Written by `bench/harness.py` (`make bench`); numbers are measured, never edited.",
             f"Command: `.venv/bin/python bench/harness.py {' '.join(argv)}`".rstrip() + " — "
             + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "",
             f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['ram']} RAM, Linux {m['kernel']}. "
             f"Python {m['python']}; agentloop {git_sha()}; "
             + (", ".join(f"{k} {v}" for k, v in versions.items()) or "LangGraph not installed")
             + ".", "",
             "Workload: each run is created over HTTP and its event stream read to the end over "
             "SSE by one client process (raw asyncio HTTP/1.1, one keep-alive connection per "
             "worker); two model calls (a streamed `add` tool call, then 40 text deltas with "
             "usage) and one tool call per run, against `bench/fake_llm.py` on loopback. Each "
             "system is started fresh per cell and warmed up first. agentloop: `POST /runs` + "
             "`GET /runs/{id}/events`; LangGraph: `langgraph dev` (in-memory runtime, "
             "`--n-jobs-per-worker 10`, no reload), prebuilt `create_react_agent`, stateless "
             "`POST /runs/stream` with `stream_mode=[\"messages\"]`. Server CPU is user+system of "
             "the server's process tree from /proc (plus redis-server's for agentloop-redis); "
             "peak RSS is VmHWM summed over the tree. Latencies are from just before the create "
             "request; \"first delta\" is the first model token event.", "",
             "## Targets", ""]
    lines += [f"- {v}" for v in verdicts(rows, extras)]
    lines += ["", "## Figures", "", *_figures_table(rows), "",
              "## Ratios (agentloop / LangGraph; below 1 is better except runs/s)", "",
              *_ratio_table(rows), "", "## agentloop only", ""]
    for key, fig in extras.items():
        lines.append(f"- `{key}`: `{fig}`")
    lines += ["", "Steer: `steer_raw_ms` runs from sending `POST /steer` (at the 20th text delta "
              "of a model streaming one delta per 20 ms) to the injected user message's "
              "`message_start`, so it includes waiting for the model's stream to end; "
              "`steer_at_poll_ms` runs from the later of the 202 and the preceding assistant "
              "`message_end` to that `message_start`. Open runs: the model sends one delta a "
              "second; `streaming` counts streams with an event in the last 2.5 s.", ""]
    path.write_text("\n".join(lines))
