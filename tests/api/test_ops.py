"""Health, readiness, metrics, tools, OpenAPI."""

from __future__ import annotations

from app import metrics
from app.backends.base import BackendError
from app.backends.memory import MemoryBackend
from providers import fake
from tests.api.conftest import Api, serve
from tool_registry import default_registry


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
        names = [f"made_up_tool_{i}" for i in range(25)]
        api.fake.script = [fake.tool_calls(*((n, {}) for n in names)),
                           fake.tool_calls(("read_file", {"path": "nope.txt"})),
                           fake.text("done")]
        run = await api.create(input="hi", model="fake:anything")
        await api.wait_status(run["id"], "completed")
        text = (await api.client.get("/metrics")).text
    assert "made_up_tool" not in text
    tools = {line.split('tool="')[1].split('"')[0] for line in text.splitlines()
             if line.startswith("agentloop_tool_latency_seconds_count")}
    assert "unknown" in tools and "read_file" in tools
    assert tools <= {"unknown", *default_registry.tools}


def test_every_label_value_is_bounded() -> None:
    assert metrics.provider_label("fake") == "other"
    assert metrics.provider_label("anthropic") == "anthropic"
    assert metrics.tool_label("read_file") == "read_file"
    assert metrics.tool_label("x" * 100) == "unknown"
    metrics.record_run_end("weird", "also-weird")
    text = metrics.metrics_response().body.decode()
    assert 'agentloop_runs_ended_total{status="other",stop_reason="other"}' in text
