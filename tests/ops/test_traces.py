"""OpenTelemetry traces of runs (``AGENTLOOP_OTEL``): GenAI span names and attributes, nested
loops under their tool, the caller's ``traceparent`` as parent, one trace across an approval
wait (a new attempt), and the OTLP HTTP export decoded by a receiver (issue 32)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.engine.events import MessageEnd, MessageStart, ToolExecutionEnd, ToolExecutionStart
from app.telemetry import traces
from app.telemetry.trace_seam import RunSpan
from app.telemetry.traces import RunTracing
from providers import fake
from providers.fake import FakeProvider
from providers.messages import AssistantMessage, Usage
from tests.api.conftest import serve
from tests.support.wire_server import Reply, WireServer
from tool_registry import function

TRACE_ID, PARENT = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
LOCATION = {"name": "get_location", "parameters": {"type": "object", "properties": {}}}


@function(toolsets=["ops_testing"])
async def ops_subagent(task: str) -> str:
    """Runs a nested loop (test tool)."""
    from app import runtime

    out = await runtime.exec(task)
    return f"inner said: {out.text}"


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """Runs' spans recorded in memory (not the global provider: FastAPI would then trace
    every later test's requests)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traces.use_provider(provider)
    yield exporter
    traces.use_provider(None)
    provider.shutdown()


def ours(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """The run spans (FastAPI adds its own HTTP spans once a provider is installed)."""
    return [s for s in exporter.get_finished_spans()
            if s.instrumentation_scope is not None and s.instrumentation_scope.name == "agentloop"]


async def until_spans(exporter: InMemorySpanExporter, name: str, n: int) -> list[ReadableSpan]:
    deadline = time.monotonic() + 15
    while len([s for s in ours(exporter) if s.name == name]) < n:
        assert time.monotonic() < deadline, [s.name for s in ours(exporter)]
        await asyncio.sleep(0.02)
    return ours(exporter)


def hexes(span: ReadableSpan) -> tuple[str, str, str | None]:
    ctx, parent = span.get_span_context(), span.parent
    return (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}",
            None if parent is None else f"{parent.span_id:016x}")


async def test_spans_of_a_run_its_nested_loop_and_its_wait(spans: InMemorySpanExporter) -> None:
    spans.clear()
    async with serve(otel=True) as api:
        api.fake.script = [fake.tool_calls(("ops_subagent", {"task": "t"}, "o1")),
                           fake.text("inner ok"), fake.tool_calls(("get_location", {}, "c1")),
                           fake.text("done")]
        resp = await api.client.post("/runs", json={
            "input": "go", "tools": ["ops_subagent"], "client_tools": [LOCATION]},
            headers={"traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
        assert resp.status_code == 201, resp.text
        run = resp.json()
        await api.wait_status(run["id"], "requires_action")
        await until_spans(spans, "invoke_agent", 1)
        answer = await api.client.post(f"/runs/{run['id']}/tool_results",
                                       json={"tool_call_id": "c1", "content": "Paris"})
        assert answer.status_code < 300, answer.text
        await api.wait_status(run["id"], "completed")
        finished = await until_spans(spans, "invoke_agent", 2)
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == ["chat test", "execute_tool get_location",
                               "execute_tool ops_subagent", "invoke_agent"]
    first, second = sorted(by_name["invoke_agent"], key=lambda s: s.start_time or 0)
    assert {hexes(s)[0] for s in finished} == {TRACE_ID}  # one trace, the caller's
    assert hexes(first)[2] == hexes(second)[2] == PARENT  # both attempts under the caller
    assert first.attributes is not None and first.attributes["agentloop.attempt"] == 1
    assert first.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert first.attributes["gen_ai.provider.name"] == "fake"
    assert first.attributes["gen_ai.request.model"] == "test"
    assert first.attributes["agentloop.parked"] is True  # it waits for the client's answer
    (tool,) = by_name["execute_tool ops_subagent"]
    assert tool.attributes is not None and hexes(tool)[2] == hexes(first)[1]
    assert (tool.attributes["gen_ai.tool.name"], tool.attributes["gen_ai.tool.call.id"]) == (
        "ops_subagent", "o1")
    chats = sorted(by_name["chat test"], key=lambda s: s.start_time or 0)
    assert [hexes(c)[2] for c in chats] == [hexes(first)[1], hexes(tool)[1], hexes(first)[1],
                                            hexes(second)[1]]  # the nested call: its tool's
    assert chats[0].attributes is not None
    assert chats[0].attributes["gen_ai.usage.input_tokens"] == 10
    assert chats[0].attributes["gen_ai.usage.output_tokens"] == 5
    assert "gen_ai.output.messages" not in chats[0].attributes  # content only when asked
    assert second.attributes is not None
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    (client,) = by_name["execute_tool get_location"]  # the client's answer, in attempt 2
    assert hexes(client)[2] == hexes(second)[1]


async def test_a_run_without_a_caller_trace_is_one_trace_across_attempts(
        spans: InMemorySpanExporter) -> None:
    spans.clear()
    async with serve(otel=True, otel_content=True) as api:
        api.fake.script = [fake.tool_calls(("get_location", {}, "c1")), fake.text("done")]
        thread = (await api.client.post("/threads", json={})).json()["id"]
        resp = await api.client.post(f"/threads/{thread}/runs", json={
            "input": "where?", "tools": [], "client_tools": [LOCATION]})
        run = resp.json()
        await api.wait_status(run["id"], "requires_action")
        await api.client.post(f"/runs/{run['id']}/tool_results",
                              json={"tool_call_id": "c1", "content": "Paris"})
        finished = await until_spans(spans, "invoke_agent", 2)
    first, second = sorted((s for s in finished if s.name == "invoke_agent"),
                           key=lambda s: s.start_time or 0)
    assert first.parent is None and hexes(second)[2] == hexes(first)[1]  # woken: its child
    assert hexes(first)[0] == hexes(second)[0]
    assert first.attributes is not None
    assert first.attributes["gen_ai.conversation.id"] == thread
    chat = next(s for s in finished if s.name == "chat test")
    assert chat.attributes is not None and "Paris" not in str(chat.attributes)
    assert "get_location" in str(chat.attributes["gen_ai.output.messages"])


async def test_spans_go_out_with_the_otlp_http_exporter() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    async with WireServer() as receiver:
        receiver.replies.append(Reply(200, chunked=False, content_type="application/x-protobuf"))
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=receiver.url + "/v1/traces")))
        run = RunTracing(provider).start(RunSpan(run_id="run_x", attempt=1, model="fake:m",
                                                 agent="helper", thread_id="thr_y"))
        t = time.time()
        reply = AssistantMessage(content=[], usage=Usage(input_tokens=7, output_tokens=3),
                                 stop_reason="tool_use")
        events: list[Any] = [MessageStart(message=reply),
                             MessageEnd(message=reply),
                             ToolExecutionStart(tool_call_id="k1", tool_name="search", args={}),
                             ToolExecutionEnd(tool_call_id="k1", tool_name="search",
                                              result={}, is_error=True)]
        for n, event in enumerate(events):
            run.observe(event, t + n / 10)
        run.end()
        assert await asyncio.to_thread(provider.force_flush, 10_000)
        provider.shutdown()
    (request,) = receiver.requests
    assert request.path == "/v1/traces"
    sent = ExportTraceServiceRequest.FromString(request.body)
    decoded = {s.name: s for rs in sent.resource_spans for ss in rs.scope_spans
               for s in ss.spans}
    assert sorted(decoded) == ["chat m", "execute_tool search", "invoke_agent helper"]
    attrs = {a.key: a.value for a in decoded["chat m"].attributes}
    assert attrs["gen_ai.usage.input_tokens"].int_value == 7
    agent = {a.key: a.value for a in decoded["invoke_agent helper"].attributes}
    assert agent["gen_ai.conversation.id"].string_value == "thr_y"
    assert decoded["execute_tool search"].status.code == 2  # STATUS_CODE_ERROR
    assert decoded["chat m"].parent_span_id == decoded["invoke_agent helper"].span_id


async def test_a_run_another_worker_takes_over_stays_one_trace(
        spans: InMemorySpanExporter, redis_url: str) -> None:
    """The first service stops mid-call (its worker hands the run back); a second one resumes
    it: attempt 2's span is a child of attempt 1's, the parent stored with the run. A SIGKILLed
    worker's successor reads the same stored parent (``test_trace_crash``: real processes)."""
    from tests.ops.conftest import redis_backend

    spans.clear()
    async with serve(backend=redis_backend(redis_url), otel=True) as first:
        first.fake.script = [fake.hanging("thinking")]
        run = await first.create(input="go", tools=[])
        await first.wait_status(run["id"], "running")
    async with serve(backend=redis_backend(redis_url), otel=True,
                     fake=FakeProvider([fake.text("done")])) as second:
        done = await second.wait_status(run["id"], "completed", "failed", within=20)
        assert done["status"] == "completed", done["error"]
        finished = await until_spans(spans, "invoke_agent", 2)
    first_span, second_span = sorted((s for s in finished if s.name == "invoke_agent"),
                                     key=lambda s: s.start_time or 0)
    assert first_span.attributes is not None and second_span.attributes is not None
    assert (first_span.attributes["agentloop.attempt"],
            second_span.attributes["agentloop.attempt"]) == (1, 2)
    assert hexes(second_span)[0] == hexes(first_span)[0]
    assert hexes(second_span)[2] == hexes(first_span)[1]


@pytest.mark.parametrize("otel", [False, True])
async def test_fastapis_own_telemetry_follows_agentloop_otel(
        otel: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """FastAPI traces its HTTP requests itself once a global provider exists (an embedding
    app's, say). With ``AGENTLOOP_OTEL`` off it is off too: no HTTP span is exported, and a
    request asks no OpenTelemetry provider (it asked the tracer, meter and logger providers
    on every request); on, FastAPI's server span for the request is exported."""
    import httpx
    from opentelemetry import metrics, trace

    from app.config import Settings
    from app.process.main import create_app

    exporter = InMemorySpanExporter()
    installed = TracerProvider()  # as if the embedding app had installed it globally
    installed.add_span_processor(SimpleSpanProcessor(exporter))
    asked: list[str] = []
    real_meter = metrics.get_meter_provider

    def tracer() -> Any:
        asked.append("tracer")
        return installed

    def meter() -> Any:
        asked.append("meter")
        return real_meter()

    monkeypatch.setattr(trace, "get_tracer_provider", tracer)
    monkeypatch.setattr(metrics, "get_meter_provider", meter)
    app = create_app(Settings(otel=otel), worker=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://agentloop") as client:
        assert (await client.get("/nope")).status_code == 404
    installed.shutdown()
    spans = [(s.name, (s.attributes or {}).get("http.response.status_code"))
             for s in exporter.get_finished_spans()]
    assert spans == ([("GET", 404)] if otel else []), spans
    assert bool(asked) is otel, asked
