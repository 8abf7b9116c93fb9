"""Prometheus metrics: the objects the API, runner and worker update, and ``/metrics``.

They live in ``prometheus_client``'s default registry (one per process). Names::

    agentloop_runs_accepted_total                    runs accepted by POST /runs
    agentloop_runs_ended_total{status, stop_reason}  runs ended, by final status and stop reason
    agentloop_active_runs                            runs being driven by this process's worker
    agentloop_queue_depth{kind}                      steering/follow-up messages waiting
    agentloop_events_written_total                   events appended to run logs
    agentloop_sse_subscribers                        open event streams
    agentloop_provider_latency_seconds{provider}     model call duration (first byte to done)
    agentloop_provider_first_byte_seconds{provider}  model call time to first event
    agentloop_tool_latency_seconds{tool, outcome}    tool execution duration (ok|error|aborted)
"""

from __future__ import annotations

from fastapi import Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

RUNS_CREATED = Counter("agentloop_runs_accepted", "Runs accepted by POST /runs.")
RUNS_ENDED = Counter("agentloop_runs_ended", "Runs ended, by final status and stop reason.",
                     ["status", "stop_reason"])
ACTIVE_RUNS = Gauge("agentloop_active_runs", "Runs being driven by this process's worker.")
QUEUE_DEPTH = Gauge("agentloop_queue_depth", "Steering/follow-up messages waiting.", ["kind"])
EVENTS_WRITTEN = Counter("agentloop_events_written", "Events appended to run logs.")
SSE_SUBSCRIBERS = Gauge("agentloop_sse_subscribers", "Open event streams.")
PROVIDER_LATENCY = Histogram("agentloop_provider_latency_seconds",
                             "Model call duration, request to done.", ["provider"],
                             buckets=_LATENCY_BUCKETS)
PROVIDER_FIRST_BYTE = Histogram("agentloop_provider_first_byte_seconds",
                                "Model call time to first event.", ["provider"],
                                buckets=_LATENCY_BUCKETS)
TOOL_LATENCY = Histogram("agentloop_tool_latency_seconds", "Tool execution duration.",
                         ["tool", "outcome"], buckets=_LATENCY_BUCKETS)

for _kind in ("steer", "follow_up"):
    QUEUE_DEPTH.labels(kind=_kind)


def record_run_end(status: str, stop_reason: str | None) -> None:
    """Count one ended run."""
    RUNS_ENDED.labels(status=status, stop_reason=stop_reason or "none").inc()


def metrics_response() -> Response:
    """The Prometheus text exposition of every metric."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
