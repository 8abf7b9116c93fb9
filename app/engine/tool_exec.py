"""Running one picked function: lookup, validation, timeout, result cap, cancellation.

Every failure is data: ``run_tool`` returns a ``ToolResult`` with ``is_error`` set and a sentence
the model can act on; it raises only ``asyncio.CancelledError`` when its own task is cancelled
(a ``CancelledError`` the tool body raises while nobody cancelled the call is a failure like any
other). Any other ``BaseException`` from a tool body (``SystemExit`` from an ``argparse``/
``click`` call, ``KeyboardInterrupt``, ``GeneratorExit``) is a failure too: left to escape, it
would stop the event loop, and with it the whole worker process and every run on it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.engine.failures import base_exception_text, stopping_for_real
from app.engine.json_safe import json_safe
from providers.messages import ImageContent, TextContent, ToolCall
from tool_registry import ArgumentError, Menu, ToolContext, ToolResult
from tool_registry.registry import AnyTool

if TYPE_CHECKING:
    from app.engine.loop_config import LoopConfig

log = logging.getLogger(__name__)

SKIPPED_FOR_STEERING = "Skipped due to queued user message."
CUT_OFF_BY_LENGTH = (
    "This tool call was not run: the response hit the output token limit (stop reason "
    "'length') while writing it, so its arguments may be incomplete. Issue the call again."
)


@dataclass(slots=True, kw_only=True)
class ToolScope:
    """What a tool body's nested ``runtime.exec`` inherits from the call that runs it."""

    menu: Menu
    tools: list[AnyTool]
    emit: Any
    depth: int
    tool_call_id: str
    run_id: str
    model: str
    provider: Any
    abort: asyncio.Event
    extra: dict[str, Any] = field(default_factory=dict)
    execs: int = 0
    """``runtime.exec`` calls the tool body made so far (the next one's ordinal)."""
    live: int = 0
    """Nested loops running in the body now (a stop lets them end on their own first)."""
    parked: list[Any] = field(default_factory=list)
    """Non-empty: a nested loop of this call parked the run for these picks
    (``app.engine.approvals.WaitingCall``); the calling loop parks too, whatever the body did."""

    @property
    def config(self) -> LoopConfig | None:
        """The calling loop's settings (``extra["config"]``), or None."""
        config: LoopConfig | None = self.extra.get("config")
        return config


class NestedParked(BaseException):
    """Raised by ``runtime.exec`` in a tool body when its loop parked the run: it unwinds the
    tool body (a ``BaseException``, so ``except Exception`` in tool code lets it through);
    the calling loop parks on ``ToolScope.parked`` even if the body swallowed it."""


current_scope: contextvars.ContextVar[ToolScope | None] = contextvars.ContextVar(
    "agentloop_tool_scope", default=None)


@dataclass(slots=True, frozen=True)
class Origin:
    """The ``source`` and ``server`` of a tool's events: set for a tool that is not this
    service's own (an MCP server's: ``tool_registry.mcp``), None otherwise."""

    source: str | None = None
    server: str | None = None


def origin(menu: Menu, name: str) -> Origin:
    """Where the menu's tool ``name`` comes from."""
    tool = menu.tools.get(name)
    source, server = getattr(tool, "source", None), getattr(tool, "server", None)
    if isinstance(source, str) and isinstance(server, str):
        return Origin(source, server)
    return Origin()


def cap_content(content: list[TextContent | ImageContent],
                limit: int) -> list[TextContent | ImageContent]:
    """Cut text longer than ``limit`` characters, keeping head and tail around a marker."""
    total = sum(len(c.text) for c in content if isinstance(c, TextContent))
    if total <= limit:
        return content
    text = "".join(c.text for c in content if isinstance(c, TextContent))
    head = limit // 2
    tail = limit - head
    cut = len(text) - head - tail
    marker = f"\n\n[… {cut} characters cut from the middle of this output …]\n\n"
    images = [c for c in content if isinstance(c, ImageContent)]
    return [TextContent(text=text[:head] + marker + text[len(text) - tail:]), *images]


async def run_tool(call: ToolCall, menu: Menu, ctx: ToolContext, *, default_timeout: float,
                   max_chars: int, invalid_args: str | None = None) -> ToolResult:
    """Run one call as the design says: unknown, invalid or failing calls become errors;
    whatever it returns, as JSON can carry it (``json_safe``)."""
    return json_safe(await _run_tool(call, menu, ctx, default_timeout=default_timeout,
                                     max_chars=max_chars, invalid_args=invalid_args))


async def _run_tool(call: ToolCall, menu: Menu, ctx: ToolContext, *, default_timeout: float,
                    max_chars: int, invalid_args: str | None) -> ToolResult:
    tool = menu.lookup(call.name)
    if tool is None:
        return ToolResult.text(f"Tool {call.name} not found", is_error=True)
    if invalid_args is not None:
        return ToolResult.text(f"Invalid arguments: {invalid_args}", is_error=True)
    try:
        args = tool.validate(call.arguments)
    except ArgumentError as exc:
        return ToolResult.text(str(exc), is_error=True)
    timeout = tool.options.timeout or default_timeout
    try:
        async with asyncio.timeout(timeout):
            result = await tool.execute(args, ctx)
    except TimeoutError:
        return ToolResult.text(f"Tool {call.name} timed out after {timeout:g} s", is_error=True)
    except NestedParked:
        raise
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is None or current.cancelling():
            raise  # this call is being cancelled (the run's cancel or deadline)
        log.debug("tool %s raised CancelledError", call.name, exc_info=True)
        return ToolResult.text(f"Tool {call.name} failed: its code raised CancelledError (some "
                               "work inside it was cancelled); the run was not cancelled",
                               is_error=True)
    except Exception as exc:
        log.debug("tool %s raised", call.name, exc_info=True)
        return ToolResult.text(str(exc) or type(exc).__name__, is_error=True)
    except BaseException as exc:
        if stopping_for_real(exc):
            raise
        log.warning("tool %s raised %s", call.name, type(exc).__name__)
        return ToolResult.text(f"Tool {call.name} failed: its code raised "
                               f"{base_exception_text(exc)}", is_error=True)
    result.content = cap_content(result.content, max_chars)
    return result
