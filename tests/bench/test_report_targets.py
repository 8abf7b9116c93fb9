"""bench/RESULTS.md's verdicts judge issue 33's targets: CPU per run against LangGraph's (Redis
in two steps), first event p50 and p99, live streams per core, CPU per frame against the relay
floor at the same step, and the every-core scaling."""

from __future__ import annotations

from typing import Any

from bench import _report


def _cell(system: str, cpu: float, p50: float, p99: float) -> dict[str, Any]:
    return {"system": system, "workload": "production", "concurrency": 50, "client_procs": 2,
            "server_cpu_ms_per_run": cpu, "first_event_ms": {"p50": p50, "p99": p99},
            "llm_calls": 400, "llm_connections": 60}


def _live(us: float, streams: int = 500) -> dict[str, Any]:
    step = {"streams": streams, "live": streams, "errors": 0, "lag_ms": {"p99": 40.0},
            "server_us_per_frame": us, "server_cpu_util": 0.5}
    return {"steps": [step], "sustained": step}


def _lines(rows: list[dict[str, Any]], extras: dict[str, Any]) -> list[str]:
    return list(_report.verdicts(rows, extras))


def test_each_target_passes_or_misses_on_its_own_figure() -> None:
    rows = [_cell("langgraph", 40.0, 1000, 1100), _cell("agentloop", 3.9, 12.0, 41.0),
            _cell("agentloop-redis", 5.0, 16.0, 45.0)]
    extras = {"live/agentloop": _live(30.0), "live/agentloop-redis": _live(45.0),
              "live/relay-floor": {"steps": [{"streams": 400, "server_us_per_frame": 15.0},
                                             {"streams": 600, "server_us_per_frame": 14.0}]}}
    out = _lines(rows, extras)
    cpu = [v for v in out if "server CPU/run" in v]
    assert cpu[0].startswith("PASS agentloop:")  # 3.9 ≤ 4.0
    assert cpu[1].startswith("PASS agentloop-redis") and "0.15×" in cpu[1]  # 5.0 ≤ 6.0
    assert cpu[2].startswith("MISS agentloop-redis") and "0.1×" in cpu[2]  # 5.0 > 4.0
    first = [v for v in out if "first event" in v]
    assert first[0].startswith("PASS") and "2 client processes" in first[0]
    assert first[1].startswith("MISS")  # p50 16 > 15
    per_core = [v for v in out if "live streams per core" in v]
    assert per_core[0].startswith("PASS")  # 30 µs/frame at 33 frames/s: 1010 per core
    assert per_core[1].startswith("MISS")  # 45 µs: 673 per core
    floor = [v for v in out if "relay floor" in v]
    assert floor[0].startswith("PASS") and "500 streams" in floor[0]  # 30 ≤ 2.5 × 15
    assert floor[1].startswith("MISS")  # 45 > 37.5


def test_cpu_per_run_is_read_against_the_production_floor_too() -> None:
    rows = [_cell("langgraph", 40.0, 1000, 1100), _cell("agentloop", 8.0, 12.0, 41.0),
            _cell("relay-floor", 2.0, 5.0, 40.0)]
    cpu = [v for v in _lines(rows, {}) if "server CPU/run" in v]
    assert cpu[0].startswith("MISS agentloop:")  # 8.0 > 4.0
    assert "4.00× the relay floor's 2.0 ms, which is 0.05× LangGraph's" in cpu[0]
    table = "\n".join(_report._ratios(rows, "production"))
    assert "| relay-floor / langgraph | " in table and "| agentloop / relay-floor | " in table


def test_missing_figures_are_not_judged() -> None:
    out = _lines([_cell("agentloop", 3.0, 10.0, 20.0)], {})
    assert all(v.startswith("n/a") for v in out if "server CPU/run" in v)
    assert any(v.startswith("n/a") and "live streams not measured" in v for v in out)


def test_a_run_written_elsewhere_keeps_its_figures_beside_its_report() -> None:
    from pathlib import Path

    from bench import harness

    assert harness.raw_path(_report.RESULTS) == harness.RAW
    assert harness.raw_path(Path("/tmp/partial.md")) == Path("/tmp/partial.json")


def test_a_report_rendered_again_names_the_measured_commit_and_time() -> None:
    text = "\n".join(_report._header([], False, {"at": "2026-01-02 03:04 UTC",
                                                  "sha": "abc1234"}))
    assert "— 2026-01-02 03:04 UTC" in text and "agentloop abc1234;" in text


def test_a_redis_cluster_cell_with_a_failed_run_is_a_miss() -> None:
    def cell(name: str, ok: int, runs: int = 200) -> dict[str, Any]:
        return {"figure": "cluster", "cell": name, "runs": runs, "ok": ok}

    rows = [_cell("langgraph", 40.0, 1000, 1100)]
    good = [v for v in _lines(rows, {"cluster": [cell("redis", 200), cell("cluster", 200)]})
            if "Redis Cluster" in v]
    assert good == ["PASS agentloop-cluster: every run of every Redis Cluster cell ok (400/400)"]
    bad = [v for v in _lines(rows, {"cluster": [
        cell("cluster", 197), cell("cluster C=300", 900, 900),
        {"figure": "cluster", "cell": "cluster/1w", "failed": "RuntimeError: exited"}]})
        if "Redis Cluster" in v]
    assert bad == ["MISS agentloop-cluster: every run of every Redis Cluster cell ok "
                   "(1097/1100); not in: cluster, cluster/1w"]


def test_every_agentloop_cell_with_a_failed_run_is_a_miss() -> None:
    ok = _cell("agentloop", 8.0, 12.0, 41.0) | {"runs": 200, "ok": 200}
    short = _cell("agentloop-redis", 8.0, 12.0, 41.0) | {"runs": 200, "ok": 198}
    micro = short | {"workload": "micro", "ok": 200}
    machine = {"throughput": [{"processes": 1, "runs": 900, "ok": 900},
                              {"processes": 2, "failed": "RuntimeError: exited"}]}
    out = [v for v in _lines([ok, short, micro], {"machine": machine})
           if "every run of every cell" in v]
    assert out == ["PASS agentloop: every run of every cell ok (200/200)",
                   "MISS agentloop-redis: every run of every cell ok (1298/1300); not in: "
                   "--processes 2, production C=50"]
