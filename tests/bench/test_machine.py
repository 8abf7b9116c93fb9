"""bench/_machine.py, the "every core" section of ``make bench``: a process tree's CPU counts
its children (``serve --processes 2`` is a supervisor and two children), a cheap run of the
section end to end (N = 1 and 2, a handful of runs, tiny live steps on short windows), and
its place in bench/RESULTS.md, right after the production path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import _live, _machine, _report
from bench._procs import TICK, tree_cpu_s, tree_pids

BURN = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4:\n    pass\n"
        "time.sleep(60)\n")


def _own_cpu_s(pid: int) -> float:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    return sum(int(x) for x in fields[11:13]) / TICK  # utime+stime


@pytest.mark.timeout(30)
def test_tree_cpu_counts_every_child() -> None:
    code = (f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {BURN!r}])\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while tree_cpu_s(parent.pid) < 0.4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(tree_pids(parent.pid)) == 2
        assert tree_cpu_s(parent.pid) >= 0.4  # the child's burn
        assert _own_cpu_s(parent.pid) < 0.3  # not the parent's own
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(5)


@pytest.fixture
def short_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live steps of seconds rather than 11 s each, the model pacing 10 ms."""
    monkeypatch.setattr(_live, "RAMP_S", 0.5)
    monkeypatch.setattr(_live, "SETTLE_S", 0.5)
    monkeypatch.setattr(_live, "WINDOW_S", 1.5)
    monkeypatch.setattr(_live, "FRAME_MS", 10.0)


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("short_steps")
def test_section_end_to_end_at_one_and_two_processes(tmp_path: Path) -> None:
    said: list[str] = []
    fig = _machine.run(runs=16, concurrency=8, sizes=[4, 8], warmup=2, client_procs=2,
                       say=said.append)
    cells = {c["processes"]: c for c in fig["throughput"]}
    assert set(cells) == {1, 2}, fig["throughput"]
    for n, cell in cells.items():
        assert cell["ok"] == cell["runs"] == 16, cell
        assert cell["first_event_ms"]["p50"] is not None
        # the fake's and redis-server's share of 16 runs can round to 0 clock ticks
        assert cell["cores"]["agentloop"] > 0 and cell["cores"]["client"] > 0
        assert cell["cores"]["fake"] >= 0 and cell["cores"]["redis"] >= 0
        assert cell["cores"]["machine"] > 0
        assert cell["util_per_process"] == pytest.approx(cell["cores"]["agentloop"] / n,
                                                         abs=1e-3)
    lives = {live["processes"]: live for live in fig["live"]}
    assert set(lives) == {1, 2}, fig["live"]
    for live in lives.values():
        assert [s["streams"] for s in live["steps"]] == [4, 8]
        for s in live["steps"]:
            assert s["live"] == s["streams"] and not s["errors"], s
            assert s["client_cpu_util"] > 0 and s["fake_cpu_util"] >= 0
            assert s["machine_busy"] > 0
    assert fig["scaling"]["runs_per_s"]["ratio"] is not None
    assert any("processes=2" in line for line in said)

    out = tmp_path / "RESULTS.md"
    _report.write(out, [], {"machine": fig}, ["--test"])
    text = out.read_text()
    assert "## Every core: `serve --processes N`" in text
    assert "cannot reach 2×" in text


def _fig() -> dict[str, Any]:
    lag = {"p50": 1.0, "p99": 20.0, "max": 30.0}
    cell = {"processes": 1, "concurrency": 200, "ok": 10, "runs": 10, "runs_per_s": 50.0,
            "server_cpu_ms_per_run": 10.0, "redis_cpu_ms_per_run": 2.0,
            "first_event_ms": {"p50": 9.0, "p99": 90.0}, "end_ms": {"p50": 1500.0},
            "util_per_process": 0.97,
            "cores": {"agentloop": 0.97, "redis": 0.2, "client": 0.3, "fake": 0.2, "sum": 1.67,
                      "machine": 1.8},
            "load_before": 1.0}
    step = {"streams": 400, "live": 400, "frames_per_s": 12000.0, "lag_ms": lag,
            "server_cpu_util": 0.8, "server_us_per_frame": 60.0, "redis_cpu_util": 0.1,
            "client_cpu_util": 0.3, "fake_cpu_util": 0.2, "machine_busy": 1.5, "load_avg": 1.2,
            "errors": []}
    fig: dict[str, Any] = {
        "figure": "machine", "system": "agentloop-redis", "nproc": 2, "concurrency": 200,
        "client_procs": 2, "worker_concurrency": 5000,
        "throughput": [cell, cell | {"processes": 2, "runs_per_s": 70.0},
                       {"processes": 2, "failed": "RuntimeError: boom"}],
        "live": [{"processes": 1, "steps": [step], "sustained": step},
                 {"processes": 2, "steps": [step | {"streams": 600}],
                  "sustained": step | {"streams": 600}}]}
    return fig | {"scaling": _machine.scaling(fig)}


def test_render_places_the_section_after_the_production_path(tmp_path: Path) -> None:
    fig = _fig()
    assert fig["scaling"] == {"runs_per_s": {"1": 50.0, "2": 70.0, "ratio": 1.4},
                              "live_streams": {"1": 400, "2": 600, "ratio": 1.5}}
    out = tmp_path / "RESULTS.md"
    _report.write(out, [], {"machine": fig}, [])
    text = out.read_text()
    production = text.index("## Production path")
    machine = text.index("## Every core: `serve --processes N`")
    assert production < machine < text.index("## Live streams per core")
    assert "runs/s 1.40×" in text and "live streams sustained 1.50×" in text
    assert "| 2 | failed: `RuntimeError: boom` |" in text
    assert "| 1 | 200 | 10/10 | 1 | 50 |" in text
    section = _machine.render(fig)
    for head in (_machine.THROUGHPUT_HEAD, _machine.LIVE_HEAD):
        rule = section[section.index(head) + 1]
        assert head.count("|") == rule.count("|")
    assert "| 1 | 400 | 400 | 12000.0 | 1.0 / 20.0 / 30.0 | 0.8 | 60.0 | 0.1 | 0.3 | 0.2 | 1.5 |" \
        in text
    assert "`machine`" not in text  # not repeated among the agentloop-only figures
    assert "1.40×" in _machine.summary(fig)
