"""What a tool is to the loop: a spec, an ``execute`` coroutine and a few policy attributes.

A tool body raising is normal: the loop turns the exception into an ``is_error`` result the model
sees. ``ToolContext`` is what the loop injects into a tool call; it is never part of the schema.
"""

from __future__ import annotations

import asyncio
import re
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


class DataSink(Protocol):
    """Sends a tool's typed data to the run's client (becomes a ``data`` event)."""

    def __call__(self, name: str, data: Any, id: str | None, /) -> None: ...


def _no_data(name: str, data: Any, id: str | None, /) -> None:
    return None


class StateHolder(Protocol):
    """The run's shared state (``app.engine.shared_state.SharedState``)."""

    @property
    def value(self) -> dict[str, Any] | None: ...

    def set(self, value: dict[str, Any]) -> None: ...

    def patch(self, ops: list[dict[str, Any]]) -> None: ...


RESERVED_DATA = frozenset({"output", "state"})
"""``emit_data`` names the service sends itself (``data-output``, ``data-state``)."""
DATA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What ``emit_data``'s ``name`` may be (it becomes the AI SDK's ``data-<name>`` part type)."""


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
    data: DataSink = _no_data
    shared: StateHolder | None = None

    def emit_data(self, name: str, data: Any, id: str | None = None) -> None:
        """Send typed data to the run's client while the tool runs: a frontend's generative
        UI (a ``data`` event: the AI SDK's ``data-<name>`` part, replaced in place by a later
        one with the same ``id``; an AG-UI ``CUSTOM`` event). ``name``: 1 to 64 letters,
        digits, ``_`` or ``-``; ``data``: any JSON value. ``ValueError`` otherwise."""
        if not isinstance(name, str) or not DATA_NAME.fullmatch(name):
            raise ValueError(f"emit_data: name {name!r} must be 1 to 64 letters, digits, _ or -")
        if name in RESERVED_DATA:
            raise ValueError(f"emit_data: {name!r} is the service's own part (the run's "
                             "structured output, its shared state): choose another name")
        if id is not None and not isinstance(id, str):
            raise ValueError("emit_data: id must be a string")
        self.data(name, data, id)

    @property
    def state(self) -> dict[str, Any]:
        """The run's shared state (a copy; ``{}`` when it has none): AG-UI's agent state."""
        value = self.shared.value if self.shared is not None else None
        return value if value is not None else {}

    def set_state(self, value: dict[str, Any]) -> None:
        """Replace the run's shared state (the client gets it whole: AG-UI
        ``STATE_SNAPSHOT``). ``ValueError`` for a non-object or one too large."""
        self._holder().set(value)

    def update_state(self, ops: list[dict[str, Any]]) -> None:
        """Change the run's shared state by RFC 6902 JSON Patch operations, all or none (the
        client gets them: AG-UI ``STATE_DELTA``). ``ValueError`` when they do not apply."""
        self._holder().patch(ops)

    def _holder(self) -> StateHolder:
        if self.shared is None:
            raise ValueError("this tool call has no shared state (it runs outside a run)")
        return self.shared


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
