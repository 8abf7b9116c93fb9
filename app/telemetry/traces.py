"""OpenTelemetry traces of runs in the GenAI semantic conventions (``AGENTLOOP_OTEL``, the
``otel`` extra). Imported only when on: the engine knows nothing of it, and a service without
it pays nothing.

Spans are made from a run's events as its sink takes them (``RunTrace.observe``), each with the
event's own time, so the loop gets no hook of its own::

    invoke_agent [agent]                      one per attempt, child of the run's traceparent
     ├ chat {model}                           a model call (message_start → message_end)
     └ execute_tool {name}                    a tool call (tool_execution_start → end)
        ├ chat {model}                        a nested runtime.exec loop's calls, under the
        └ execute_tool {name}                 tool that runs it (events of depth > 0)

Every attempt of a run (a resume after a lost worker, a wake after an approval days later)
has the same parent: the request's ``traceparent``, else the first attempt's span (stored with
the run as ``RunRecord.traceparent``), so a run is one trace. Prompts' and answers' content go
on the spans only with ``AGENTLOOP_OTEL_CONTENT``.
"""

from __future__ import annotations

from typing import Any

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.telemetry.trace_seam import RunSpan

_PROPAGATOR = TraceContextTextMapPropagator()
_chosen: trace.TracerProvider | None = None


def use_provider(provider: trace.TracerProvider | None) -> None:
    """Make runs' spans go to ``provider`` (an embedding app's, a test's) instead of the global
    one; None undoes it."""
    global _chosen
    _chosen = provider


def tracer_provider() -> trace.TracerProvider:
    """The provider runs' spans go to: ``use_provider``'s, else one already installed
    globally, else the SDK's exporting with OTLP over HTTP as the ``OTEL_*`` variables say,
    installed globally (FastAPI then adds its HTTP spans too)."""
    if _chosen is not None:
        return _chosen
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "agentloop"}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


class RunTracing:
    """Makes each attempt's ``RunTrace``; ``content``: put messages on the spans."""

    def __init__(self, provider: trace.TracerProvider | None = None, *,
                 content: bool = False) -> None:
        self.tracer = (provider or tracer_provider()).get_tracer("agentloop")
        self.content = content

    def start(self, run: RunSpan) -> RunTrace:
        """The ``invoke_agent`` span of this attempt, started now."""
        parent = _PROPAGATOR.extract({"traceparent": run.traceparent}) \
            if run.traceparent else Context()
        model, agent = run.model, run.agent
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", **_model_attributes(model),
            "agentloop.run_id": run.run_id, "agentloop.attempt": run.attempt}
        if agent:
            attributes["gen_ai.agent.name"] = agent
        if run.thread_id:
            attributes["gen_ai.conversation.id"] = run.thread_id
        span = self.tracer.start_span(f"invoke_agent {agent}" if agent else "invoke_agent",
                                      context=parent, kind=SpanKind.INTERNAL,
                                      attributes=attributes)
        return RunTrace(self.tracer, span, model, content=self.content)


class RunTrace:
    """One attempt's spans (see the module docstring); ``observe`` is the sink's per-event
    call, ``end`` closes whatever is open."""

    def __init__(self, tracer: Tracer, span: Span, model: str, *, content: bool) -> None:
        self.tracer = tracer
        self.span = span
        self.content = content
        self._models: dict[str | None, str] = {None: model}
        """The model of the loop a depth's events come from, by the tool running it."""
        self._calls: dict[str | None, Span] = {}
        """Open model calls, by the tool running their loop (None: the run's own)."""
        self._tools: dict[str, Span] = {}

    @property
    def traceparent(self) -> str:
        """This attempt's span as a W3C ``traceparent``."""
        ctx = self.span.get_span_context()
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    def observe(self, event: object, t: float) -> None:
        """Open or close the span ``event`` starts or ends (at ``t``, epoch seconds)."""
        kind: str = getattr(event, "type", "")
        under: str | None = getattr(event, "parent_tool_call_id", None)
        if kind == "agent_start" and under is not None:
            self._models[under] = str(getattr(event, "model", ""))
        elif kind in ("message_start", "message_end"):
            message = getattr(event, "message", None)
            if getattr(message, "role", "") == "assistant":
                self._call(kind == "message_start", under, message, t)
        elif kind == "tool_execution_start":
            self._tool_start(event, under, t)
        elif kind == "tool_execution_end":
            self._tool_end(event, t)
        elif kind == "agent_end" and not getattr(event, "depth", 0):
            reason = str(getattr(event, "stop_reason", ""))
            self.span.set_attribute("gen_ai.response.finish_reasons", [reason])
            if reason in ("error", "output_invalid"):
                self.span.set_status(Status(StatusCode.ERROR, getattr(event, "error", None)))
                self.span.set_attribute("error.type", reason)

    def end(self, *, parked: bool = False, error: str | None = None) -> None:
        """The attempt is over: close what is still open, then its own span."""
        for span in [*self._calls.values(), *self._tools.values()]:
            span.end()
        self._calls.clear()
        self._tools.clear()
        if parked:
            self.span.set_attribute("agentloop.parked", True)
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.span.end()

    def _parent(self, under: str | None) -> Context:
        span = self._tools.get(under) if under is not None else None
        return trace.set_span_in_context(span or self.span)

    def _call(self, start: bool, under: str | None, message: Any, t: float) -> None:
        if start:
            model = self._models.get(under, self._models[None])
            self._calls[under] = self.tracer.start_span(
                f"chat {model.partition(':')[2] or model}", context=self._parent(under),
                kind=SpanKind.CLIENT, start_time=_ns(t),
                attributes={"gen_ai.operation.name": "chat", **_model_attributes(model)})
            return
        span = self._calls.pop(under, None)
        if span is None:
            return
        usage = getattr(message, "usage", None)
        span.set_attribute("gen_ai.usage.input_tokens", getattr(usage, "input_tokens", 0))
        span.set_attribute("gen_ai.usage.output_tokens", getattr(usage, "output_tokens", 0))
        reason = str(getattr(message, "stop_reason", ""))
        span.set_attribute("gen_ai.response.finish_reasons", [reason])
        if reason == "error":
            span.set_status(Status(StatusCode.ERROR, getattr(message, "error_message", None)))
            span.set_attribute("error.type", "provider_error")
        if self.content:
            span.set_attribute("gen_ai.output.messages", _json(message))
        span.end(end_time=_ns(t))

    def _tool_start(self, event: object, under: str | None, t: float) -> None:
        name = str(getattr(event, "tool_name", ""))
        call_id = str(getattr(event, "tool_call_id", ""))
        attributes: dict[str, Any] = {"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                                      "gen_ai.tool.type": "function"}
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = _json(getattr(event, "args", {}))
        self._tools[call_id] = self.tracer.start_span(
            f"execute_tool {name}", context=self._parent(under), kind=SpanKind.INTERNAL,
            start_time=_ns(t), attributes=attributes)

    def _tool_end(self, event: object, t: float) -> None:
        span = self._tools.pop(str(getattr(event, "tool_call_id", "")), None)
        if span is None:
            return
        if getattr(event, "is_error", False):
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", "tool_error")
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", _json(getattr(event, "result", {})))
        span.end(end_time=_ns(t))


def _model_attributes(model: str) -> dict[str, str]:
    provider, _, name = model.partition(":")
    return {"gen_ai.provider.name": provider, "gen_ai.request.model": name or provider}


def _ns(t: float) -> int:
    return int(t * 1e9)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, default=_plain).decode()
    except TypeError:
        return str(value)


def _plain(value: Any) -> Any:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    raise TypeError
