"""Health, readiness, metrics, tools, OpenAPI."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.config import Settings
from app.process.liveness import max_age
from app.store import make_backend
from app.store.errors import BackendError
from app.store.memory.backend import MemoryBackend
from app.telemetry import metrics
from app.telemetry.logs import ContextFilter
from app.worker import janitor
from app.worker.janitor import sweep
from providers import fake
from tests.api.conftest import Api, serve
from tests.engine.harness import new_record, wait_end
from tests.engine.processes import ROOT, spawn_worker, stop_all, wait_consumer
from tests.engine.test_crash import wait_tool_start
from tool_registry.builtin import _proc, probe


class DownBackend(MemoryBackend):
    async def ping(self) -> bool:
        raise BackendError("connection refused")


async def test_health_ready_metrics_docs(api_no_worker: Api) -> None:
    c = api_no_worker.client
    assert (await c.get("/healthz")).json() == {"status": "ok"}
    ready = (await c.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["backend"] == "memory"
    assert ready["sandbox"] in ("bubblewrap", "unsafe", "disabled")
    text = (await c.get("/metrics")).text
    for name in ("agentloop_runs_accepted_total", "agentloop_runs_ended_total",
                 "agentloop_active_runs", "agentloop_queue_depth",
                 "agentloop_events_written_total", "agentloop_sse_subscribers",
                 "agentloop_provider_latency_seconds", "agentloop_tool_latency_seconds"):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
    assert (await c.get("/openapi.json")).json()["paths"]["/runs"]["post"]
    assert (await c.get("/docs")).status_code == 200


async def test_readyz_is_503_when_the_backend_is_down() -> None:
    async with serve(backend=DownBackend(), worker=False) as api:
        resp = await api.client.get("/readyz")
        assert resp.status_code == 503
        assert resp.json()["status"] == "unavailable"
        assert (await api.client.get("/healthz")).status_code == 200


async def test_tools_lists_the_menu(api_no_worker: Api) -> None:
    tools = (await api_no_worker.client.get("/tools")).json()
    by_name = {t["name"]: t for t in tools}
    assert "read_file" in by_name
    entry = by_name["read_file"]
    assert set(entry) == {"name", "description", "parameters", "toolsets", "deferred"}
    assert entry["parameters"]["type"] == "object"
    assert "readonly" in entry["toolsets"]


async def test_hallucinated_tool_names_fold_into_one_metrics_label() -> None:
    async with serve() as api:
        before = _tool_labels((await api.client.get("/metrics")).text)  # earlier tests'
        names = [f"made_up_tool_{i}" for i in range(25)]
        api.fake.script = [fake.tool_calls(*((n, {}) for n in names)),
                           fake.tool_calls(("read_file", {"path": "nope.txt"})),
                           fake.text("done")]
        run = await api.create(input="hi", model="fake:anything")
        await api.wait_status(run["id"], "completed")
        text = (await api.client.get("/metrics")).text
    assert "made_up_tool" not in text
    tools = _tool_labels(text)
    assert "unknown" in tools and "read_file" in tools
    assert tools - before <= {"unknown", "read_file"}  # 26 picks, two labels


def _tool_labels(metrics: str) -> set[str]:
    """The ``tool`` labels of the tool latency metric (the process's, every test's so far)."""
    return {line.split('tool="')[1].split('"')[0] for line in metrics.splitlines()
            if line.startswith("agentloop_tool_latency_seconds_count")}


def test_every_label_value_is_bounded() -> None:
    assert metrics.provider_label("anthropic") == "anthropic"
    seen = {metrics.provider_label(f"custom{i}") for i in range(metrics.MAX_EXTRA_PROVIDERS + 5)}
    assert "other" in seen and len(seen) <= metrics.MAX_EXTRA_PROVIDERS + 1
    assert metrics.tool_label("read_file") == "read_file"
    assert metrics.tool_label("x" * 100) == "unknown"
    metrics.record_run_end("weird", "also-weird")
    text = metrics.metrics_response().body.decode()
    assert 'agentloop_runs_ended_total{status="other",stop_reason="other"}' in text


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    probe.forget()
    yield
    probe.forget()


async def test_readyz_reports_the_start_up_probe_of_a_real_sandboxed_program(
        fresh_probe: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serve(worker=False, unsafe_code_tools=True) as api:
        ready = (await api.client.get("/readyz")).json()
        menu = {t["name"] for t in (await api.client.get("/tools")).json()}
    assert ready["sandbox"] in ("bubblewrap", "unsafe")
    assert ready["sandbox_probe"]["ok"] is True, ready
    assert ready["sandbox_probe"]["mode"] == ready["sandbox"]
    assert {"run_python", "run_shell"} <= menu
    assert any("sandbox probe ok" in r.getMessage() for r in caplog.records)


async def test_a_failing_spawn_path_turns_code_tools_off_and_readyz_says_why(
        fresh_probe: None, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def uvloop_refuses(*args: object, **kwargs: object) -> None:
        raise ValueError("unexpected kwargs: user, group, extra_groups")  # what main hit

    monkeypatch.setattr(_proc.asyncio, "create_subprocess_exec", uvloop_refuses)
    async with serve(worker=False, unsafe_code_tools=True) as api:
        ready = (await api.client.get("/readyz")).json()
        menu = {t["name"] for t in (await api.client.get("/tools")).json()}
    assert ready["status"] == "ready" and ready["sandbox"] == "disabled", ready
    assert ready["sandbox_probe"]["ok"] is False
    assert "unexpected kwargs" in ready["sandbox_probe"]["detail"]
    assert "run_python" not in menu and "run_shell" not in menu and "read_file" in menu
    assert any("sandbox probe FAILED" in r.getMessage() and r.levelno == logging.ERROR
               for r in caplog.records)


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_a_workspace_goes_when_its_run_expires(kind: str, request: pytest.FixtureRequest,
                                                     tmp_path: Path) -> None:
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    backend = make_backend(url, lease=5.0, run_ttl=1)
    await backend.start()
    try:
        rec, _ = await backend.create_run(new_record())
        claims = await backend.claim_many("w1", 1.0, 1)
        root, shared = tmp_path / "workspaces", tmp_path / "workspaces" / "shared"
        for name in (rec.id, "orphan", "fresh-orphan", "shared"):
            (root / name).mkdir(parents=True)
            (root / name / "file.txt").write_text("x")
        for name in (rec.id, "orphan", "shared"):
            os.utime(root / name, (time.time() - 7200, time.time() - 7200))
        assert await sweep(backend, root, keep=shared) == ["orphan"]  # the run is stored
        await backend.finish(rec.id, claims[0].attempt)  # its TTL (1 s) starts
        async with asyncio.timeout(15):
            while await backend.get_run(rec.id) is not None:
                await asyncio.sleep(0.1)
        assert await sweep(backend, root, keep=shared) == [rec.id]
    finally:
        await backend.close()
    assert sorted(os.listdir(root)) == ["fresh-orphan", "shared"]


async def test_the_worker_sweeps_workspaces_periodically(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(janitor, "GRACE_SECONDS", 1.0)
    root = tmp_path / "workspaces"
    (root / "left-behind").mkdir(parents=True)
    os.utime(root / "left-behind", (time.time() - 60, time.time() - 60))
    async with serve(workspace_root=root, workspace_sweep_seconds=0.2):
        async with asyncio.timeout(15):
            while await asyncio.to_thread(os.path.exists, root / "left-behind"):
                await asyncio.sleep(0.1)


@pytest.mark.timeout(120)
async def test_log_lines_of_a_resumed_run_carry_run_id_and_tenant(redis_url: str,
                                                                  tmp_path: Path) -> None:
    """A real worker process (JSON logs, DEBUG) resumes a run whose first worker was killed:
    every line it logs about the run names the run and its tenant."""
    backend = make_backend(redis_url, lease=1.0)
    await backend.start()
    marks, log_file = tmp_path / "marks", tmp_path / "b.log"
    a = spawn_worker(redis_url, "A", marks, nap=2)  # killed mid-nap; B naps 2 s again
    b = None
    try:
        await wait_consumer(redis_url, "A", 30)
        rec, _ = await backend.create_run(new_record())
        await wait_tool_start(backend, rec.id, "nap")
        a.send_signal(signal.SIGKILL)  # before B starts: B must be the one to finish it
        b = spawn_worker(redis_url, "B", marks, nap=0.2, log=log_file, extra_env={
            "AGENTLOOP_LOG_FORMAT": "json", "AGENTLOOP_LOG_LEVEL": "DEBUG"})
        end = await wait_end(backend, rec.id, timeout=30)
        b.send_signal(signal.SIGTERM)
        await asyncio.to_thread(b.wait, 15)
    finally:
        stop_all(a, *([b] if b else []))
        await backend.close()
    assert end.status == "completed"
    logged = await asyncio.to_thread(log_file.read_bytes)
    lines = [orjson.loads(line) for line in logged.splitlines() if line.startswith(b"{")]
    about = [ln for ln in lines if rec.id in ln["message"] or ln.get("run_id")]
    messages = [ln["message"] for ln in lines]
    assert any("resuming attempt 2" in ln["message"] for ln in about), messages
    for line in about:
        assert line.get("run_id") == rec.id and line.get("tenant") == "t", line


class GetRunDown(MemoryBackend):
    async def get_run_and_events(self, run_id: str, after: int, limit: int) -> Any:
        raise BackendError("connection refused")


async def test_requests_about_a_run_log_with_its_run_id_and_tenant(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.handler.addFilter(ContextFilter())
    caplog.set_level(logging.INFO)
    async with serve(backend=GetRunDown(), api_key="k1", api_keys="k1:tenant1") as api:
        run = await api.create(input="hi", tools=[])
        resp = await api.client.get(f"/runs/{run['id']}/events")
    assert resp.status_code == 503
    about = [r for r in caplog.records  # the test's own client (httpx) logs too
             if run["id"] in r.getMessage() and r.name != "httpx"]
    assert "app.api.errors" in {r.name for r in about}, [
        (r.name, r.getMessage()) for r in caplog.records]
    for record in about:
        assert (getattr(record, "run_id", None), getattr(record, "tenant", None)) == (
            run["id"], "tenant1"), (record.name, record.getMessage())


def _health(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.process.cli", "health", *args], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=30, check=False)


@pytest.mark.timeout(150)
async def test_agentloop_health_checks_the_api_and_a_worker(redis_url: str,
                                                            tmp_path: Path) -> None:
    beat_file = tmp_path / "worker.health"
    env = {"AGENTLOOP_HEALTH_FILE": str(beat_file), "AGENTLOOP_HEARTBEAT_SECONDS": "0.5"}
    limit = max_age(Settings(heartbeat_seconds=0.5))  # what `health --worker` allows
    missing = await asyncio.to_thread(_health, "--worker", env=env)
    assert missing.returncode != 0 and "no heartbeat file" in missing.stderr
    worker = spawn_worker(redis_url, "H", tmp_path / "marks", extra_env=env)
    try:
        async with asyncio.timeout(60):  # a worker's start takes ~9 s here under load
            while not beat_file.exists():  # its first beat
                await asyncio.sleep(0.1)
        fresh = await asyncio.to_thread(_health, "--worker", env=env)
        assert fresh.returncode == 0, fresh.stderr
        worker.send_signal(signal.SIGSTOP)  # a hung worker stops beating: unhealthy soon
        async with asyncio.timeout(30):
            while time.time() - beat_file.stat().st_mtime <= limit + 0.5:
                await asyncio.sleep(0.2)
        stale = await asyncio.to_thread(_health, "--worker", env=env)
        assert stale.returncode != 0 and "heartbeat" in stale.stderr, stale.stderr
    finally:
        worker.send_signal(signal.SIGCONT)
        stop_all(worker)
    async with serve(worker=False) as api:
        port = api.url.rsplit(":", 1)[1]
        up = await asyncio.to_thread(_health, "--port", port, env={})
        assert up.returncode == 0, up.stderr
    closed = await asyncio.to_thread(_health, "--port", port, env={})
    assert closed.returncode != 0 and "unhealthy" in closed.stderr


def test_the_health_check_imports_neither_the_api_nor_a_worker(tmp_path: Path) -> None:
    """Docker runs `agentloop health` every 15 s for the life of a container: it loads the
    settings and reads a file or asks /healthz, without importing the service (1.7 s of CPU
    per check on our test host when it did)."""
    probe_code = (
        "import sys\n"
        "from app.process import cli\n"
        "try:\n    cli.main(['health', '--worker'])\nexcept SystemExit as exc:\n"
        "    print('exit', exc, file=sys.stderr)\n"
        "heavy = ('uvicorn', 'fastapi', 'httpx', 'redis', 'mcp', 'app.process.main',\n"
        "         'app.store.contract', 'app.worker', 'providers', 'tool_registry')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe_code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False,
                          env={**os.environ, "AGENTLOOP_HEALTH_FILE": str(tmp_path / "none")})
    assert done.returncode == 0, done.stderr
    assert "exit unhealthy: no heartbeat file" in done.stderr
    assert done.stdout.strip() == "[]"
