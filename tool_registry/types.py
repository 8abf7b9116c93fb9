"""What a tool is to the loop: a spec, an ``execute`` coroutine and a few policy attributes.

A tool body raising is normal: the loop turns the exception into an ``is_error`` result the model
sees. ``ToolContext`` is what the loop injects into a tool call; it is never part of the schema.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from providers.base import ToolSpec
from providers.messages import ImageContent, TextContent

DEFAULT_TIMEOUT = 120.0
"""Seconds a tool call may take unless the tool says otherwise."""


class Progress(Protocol):
    """Reports partial output of a running tool (becomes ``tool_execution_update``)."""

    def __call__(self, partial: Any, /) -> None: ...


CancelSignal = asyncio.Event
"""Set when the run is cancelled; long tools may poll it to stop early."""


def _no_progress(partial: Any, /) -> None:
    return None


@dataclass(slots=True, kw_only=True)
class ToolContext:
    """Injected into a tool call: who is calling and how to report back."""

    run_id: str = ""
    tool_call_id: str = ""
    tool_name: str = ""
    depth: int = 0
    tenant: str | None = None
    workspace: Path | None = None
    """The run's working directory for file and code tools (created on first use)."""
    cancel: CancelSignal = field(default_factory=asyncio.Event)
    progress: Progress = _no_progress
    menu: Any = None
    """The run's ``tool_registry.Menu`` (``tool_search`` loads deferred tools through it)."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class ToolResult:
    """What a tool returns: content the model reads, ``details`` only the client sees."""

    content: list[TextContent | ImageContent]
    details: Any = None
    is_error: bool = False

    @classmethod
    def text(cls, text: str, *, details: Any = None, is_error: bool = False) -> ToolResult:
        """A result of one text block."""
        return cls(content=[TextContent(text=text)], details=details, is_error=is_error)


class ArgumentError(ValueError):
    """Arguments did not match the tool's schema; the message names each bad field."""


@runtime_checkable
class Tool(Protocol):
    """A tool the loop can run. Policy attributes are read with ``getattr`` defaults."""

    spec: ToolSpec

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Run with validated ``args``; raising becomes an ``is_error`` result."""
        ...


@dataclass(slots=True, kw_only=True)
class ToolOptions:
    """Per-tool policy (set through ``@function(...)`` or on a wrapped tool).

    - ``timeout``: seconds per call (None: the loop default)
    - ``defer``: schema not sent until ``tool_search`` finds the tool
    - ``toolsets``: named toolsets the tool belongs to (beside ``full``)
    - ``unsafe_in``: source channels (``tools_source``) the tool is removed from
    - ``requires_env``: environment variables that must be set for the tool to be offered
    - ``available_if``: checked once at registration; False leaves the tool out for good
    - ``check_fn``: checked on every menu build; False hides the tool for now
    - ``expose``: False keeps the tool callable from Python but off every menu
    - ``approval``: True (or a predicate over the arguments returning True) makes every pick
      of the tool wait for a person's approval (``app.approvals``)
    """

    timeout: float | None = None
    defer: bool = False
    toolsets: tuple[str, ...] = ()
    unsafe_in: tuple[str, ...] = ()
    requires_env: tuple[str, ...] = ()
    available_if: Callable[[], bool] | None = None
    check_fn: Callable[[], bool] | None = None
    expose: bool = True
    approval: bool | Callable[[dict[str, Any]], bool] = False
