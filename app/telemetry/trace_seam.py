"""What the worker knows of tracing (``app.telemetry.traces`` has the OpenTelemetry side, and
is imported only when ``AGENTLOOP_OTEL`` is on): an attempt starts a ``Trace`` that sees every
event its sink takes and is ended once the attempt is over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True, frozen=True, kw_only=True)
class RunSpan:
    """The run an attempt's span is of."""

    run_id: str
    attempt: int
    model: str
    """``provider:model``."""
    agent: str | None = None
    thread_id: str | None = None
    traceparent: str | None = None
    """The parent every attempt's span has (``RunRecord.traceparent``)."""


class Trace(Protocol):
    """One attempt's spans."""

    @property
    def traceparent(self) -> str:
        """The attempt's own span, as a W3C ``traceparent`` (a run without a parent stores the
        first attempt's, so later ones join its trace)."""
        ...

    def observe(self, event: object, t: float) -> None:
        """One event the sink took at ``t`` (epoch seconds)."""
        ...

    def end(self, *, parked: bool = False, error: str | None = None) -> None:
        """The attempt is over (``parked``: it waits for people)."""
        ...


class Tracing(Protocol):
    """Starts each attempt's ``Trace``."""

    def start(self, run: RunSpan) -> Trace:
        """The attempt's span, started now."""
        ...
