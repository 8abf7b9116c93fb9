"""Prometheus metrics: the objects the API, runner and worker update, and ``/metrics``.

They live in ``prometheus_client``'s default registry (one per process). Under ``agentloop
serve --processes N`` (N > 1) the processes share them through prometheus_client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, set by ``app.process.supervisor``): whichever
process answers ``/metrics`` reports the sum over all of them; counters and histograms keep
the counts of a process that has exited (a restart does not set them back), the gauges of
live values (active runs, open streams) count live processes only. Names::

    agentloop_runs_accepted_total                    runs accepted by POST /runs
    agentloop_runs_ended_total{status, stop_reason}  runs ended, by final status and stop reason
    agentloop_active_runs                            runs being driven by this process's worker
    agentloop_queue_depth{kind}                      steering/follow-up messages waiting
    agentloop_events_written_total                   events appended to run logs
    agentloop_sse_subscribers                        open event streams
    agentloop_provider_latency_seconds{provider}     model call duration (first byte to done)
    agentloop_provider_first_byte_seconds{provider}  model call time to first event
    agentloop_tool_latency_seconds{tool, outcome}    tool execution duration (ok|error|aborted)
    agentloop_tokens_total{kind, provider, model}    tokens of ended runs: kind input, output,
                                                     cache_read or cache_write
    agentloop_quota_refusals_total{limit}            requests refused 429 quota_exceeded
    agentloop_webhook_attempts_total{outcome}        webhook deliveries tried (ok|failed|refused)

Every label takes values from a bounded set, so no request or model output can grow the
number of series: ``tool`` is a registered tool's name or ``unknown`` (a hallucinated name),
``provider`` a known provider or profile name, or one of at most ``MAX_EXTRA_PROVIDERS`` others
(custom provider factories), then ``other``; ``model`` one of the first ``MAX_MODELS`` seen,
then ``other``; ``status``/``stop_reason``/``kind`` their
documented values or ``other``. ``configure_labels`` names the registry and the extra provider
profiles at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from fastapi import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from app.telemetry.multiprocess import collect_lock
from providers.catalog import BUILTIN, builtin_profiles
from tool_registry import Registry, default_registry

OTHER = "other"
"""The label value every unexpected value folds into."""
UNKNOWN_TOOL = "unknown"
"""The ``tool`` label of calls to names no registered tool has."""
MAX_EXTRA_PROVIDERS = 20
"""Provider label values admitted beyond the known ones (a custom factory's prefixes)."""
_extra_providers: set[str] = set()
MAX_MODELS = 50
"""Model label values admitted (the first seen), then ``other``."""
_models: set[str] = set()
_TOKEN_KINDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_STATUSES = frozenset({"completed", "failed", "cancelled"})
_STOP_REASONS = frozenset({"stop", "max_iterations", "error", "aborted", "output_invalid",
                           "budget", "none"})
_providers: frozenset[str] = frozenset({*BUILTIN, *builtin_profiles()})
_tool_names: Callable[[], Collection[str]] = lambda: default_registry.tools  # noqa: E731


def configure_labels(*, registry: Registry | None = None,
                     providers: Iterable[str] = ()) -> None:
    """The tools and provider names whose values labels may take (start-up)."""
    global _providers, _tool_names
    _providers = frozenset({*BUILTIN, *builtin_profiles(), *providers})
    if registry is not None:
        _tool_names = lambda: registry.tools  # noqa: E731


def tool_label(name: str) -> str:
    """``name`` if a tool of that name is registered, else ``unknown``."""
    return name if name in _tool_names() else UNKNOWN_TOOL


def provider_label(name: str) -> str:
    """``name`` if it is a known provider or profile (or one of the first few others), else
    ``other``."""
    if name in _providers or name in _extra_providers:
        return name
    if len(_extra_providers) < MAX_EXTRA_PROVIDERS:
        _extra_providers.add(name)
        return name
    return OTHER


def _one_of(value: str, allowed: Collection[str]) -> str:
    return value if value in allowed else OTHER

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

RUNS_CREATED = Counter("agentloop_runs_accepted", "Runs accepted by POST /runs.")
RUNS_ENDED = Counter("agentloop_runs_ended", "Runs ended, by final status and stop reason.",
                     ["status", "stop_reason"])
# multiprocess_mode (ignored in one process): what the processes' values sum to. ``livesum``:
# the values of live processes only (an exited process drives no run, serves no stream);
# ``sum``: a process that exited still counts (the queue depth is a net of increments made
# by API and worker processes alike).
ACTIVE_RUNS = Gauge("agentloop_active_runs", "Runs being driven by this process's worker.",
                    multiprocess_mode="livesum")
QUEUE_DEPTH = Gauge("agentloop_queue_depth", "Steering/follow-up messages waiting.", ["kind"],
                    multiprocess_mode="sum")
EVENTS_WRITTEN = Counter("agentloop_events_written", "Events appended to run logs.")
SSE_SUBSCRIBERS = Gauge("agentloop_sse_subscribers", "Open event streams.",
                        multiprocess_mode="livesum")
PROVIDER_LATENCY = Histogram("agentloop_provider_latency_seconds",
                             "Model call duration, request to done.", ["provider"],
                             buckets=_LATENCY_BUCKETS)
PROVIDER_FIRST_BYTE = Histogram("agentloop_provider_first_byte_seconds",
                                "Model call time to first event.", ["provider"],
                                buckets=_LATENCY_BUCKETS)
TOOL_LATENCY = Histogram("agentloop_tool_latency_seconds", "Tool execution duration.",
                         ["tool", "outcome"], buckets=_LATENCY_BUCKETS)

TOKENS = Counter("agentloop_tokens", "Tokens of ended runs.", ["kind", "provider", "model"])
QUOTA_REFUSALS = Counter("agentloop_quota_refusals", "Requests refused for a quota.", ["limit"])
WEBHOOK_ATTEMPTS = Counter("agentloop_webhook_attempts", "Webhook deliveries tried.",
                           ["outcome"])
LIMIT_REFUSALS = Counter("agentloop_limit_refusals", "Requests refused at a bound that holds "
                         "without configuration.", ["limit"])
"""``limit``: ``max_streams_per_user`` (429 too_many_streams) or ``max_queued_messages``
(409 queue_full)."""
STRANDED_RUNS = Counter("agentloop_stranded_runs", "Runs found queued without a job (a "
                        "process died between the two writes) and dispatched again.")
for _limit in ("max_streams_per_user", "max_queued_messages"):
    LIMIT_REFUSALS.labels(limit=_limit)

for _kind in ("steer", "follow_up"):
    QUEUE_DEPTH.labels(kind=_kind)


def record_run_end(status: str, stop_reason: str | None) -> None:
    """Count one ended run."""
    RUNS_ENDED.labels(status=_one_of(status, _STATUSES),
                      stop_reason=_one_of(stop_reason or "none", _STOP_REASONS)).inc()


def model_label(model: str) -> str:
    """``model`` while fewer than ``MAX_MODELS`` values have been seen, else ``other``."""
    if model in _models:
        return model
    if len(_models) < MAX_MODELS:
        _models.add(model)
        return model
    return OTHER


def record_tokens(model: str, usage: dict[str, int]) -> None:
    """Count an ended run's tokens (``model``: ``provider:model``)."""
    provider, _, name = model.partition(":")
    labels = (provider_label(provider), model_label(name or provider))
    for kind in _TOKEN_KINDS:
        if usage.get(kind):
            TOKENS.labels(kind.removesuffix("_tokens"), *labels).inc(usage[kind])


def metrics_response(multiprocess_dir: str | None = None) -> Response:
    """The Prometheus text exposition of every metric: this process's, or with
    ``multiprocess_dir`` the sum over every process sharing that directory."""
    if multiprocess_dir is None:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=multiprocess_dir)  # type: ignore[no-untyped-call]
    with collect_lock(multiprocess_dir):  # no exited process's fold seen half-done
        text = generate_latest(registry)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


class RunTimings:
    """Provider and tool latencies of one run, read off its events as the sink buffers them.

    Cheap on the hot path: one set lookup per event; deltas only note the first byte.
    """

    __slots__ = ("_call_start", "_first", "_provider", "_tools")
    _WATCHED = frozenset({"message_start", "message_update", "message_end",
                          "tool_execution_start", "tool_execution_end"})

    def __init__(self, provider: str) -> None:
        self._provider = provider_label(provider)
        self._call_start: float | None = None
        self._first = False
        self._tools: dict[str, float] = {}

    def observe(self, event: object, t: float) -> None:
        """Note one event emitted at ``t`` (seconds)."""
        kind: str = getattr(event, "type", "")
        depth: int = getattr(event, "depth", 0)
        if kind not in self._WATCHED or depth:
            return
        if kind == "message_update":
            if self._call_start is not None and not self._first:
                self._first = True
                PROVIDER_FIRST_BYTE.labels(self._provider).observe(t - self._call_start)
        elif kind == "tool_execution_start":
            self._tools[getattr(event, "tool_call_id", "")] = t
        elif kind == "tool_execution_end":
            start = self._tools.pop(getattr(event, "tool_call_id", ""), None)
            if start is not None:
                outcome = "error" if getattr(event, "is_error", False) else "ok"
                name = tool_label(getattr(event, "tool_name", ""))
                TOOL_LATENCY.labels(name, outcome).observe(t - start)
        elif getattr(getattr(event, "message", None), "role", "") == "assistant":
            if kind == "message_start":
                self._call_start, self._first = t, False
            elif self._call_start is not None:
                PROVIDER_LATENCY.labels(self._provider).observe(t - self._call_start)
                self._call_start = None
