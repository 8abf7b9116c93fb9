"""``runtime.exec`` and ``runtime.stream``: the loop for Python callers and nested tools.

Tools are on by default: with neither ``tools`` nor ``toolset`` a call gets the full registry
toolset; ``toolset="none"`` or ``tools=[]`` makes a pure text call. Called inside a tool body,
``exec`` inherits the outer call's tools, model and provider, and its events go to the outer
sink with ``depth`` + 1 and the parent ``tool_call_id``; cancelling the outer run cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.events import Event
from app.loop import LoopConfig, run_loop
from app.loop.tool_exec import current_scope
from app.queues import MessageSource, QueueMode
from providers.base import ForcedTool, Provider, ToolChoice
from providers.messages import Message, Usage, UserMessage
from tool_registry import Menu, build_menu

Resolver = Callable[[str], tuple[Provider, str]]
_resolver: Resolver | None = None
_default_model = "demo:echo"


@dataclass(slots=True, kw_only=True)
class ExecResult:
    """What ``exec`` returns: the final text, the messages it added, why it stopped."""

    text: str | None
    messages: list[Message]
    stop_reason: str
    usage: Usage
    error: str | None


def configure(resolver: Resolver | None, default_model: str | None = None) -> None:
    """Set how model strings become providers (the service does this at start-up)."""
    global _resolver, _default_model
    _resolver = resolver
    if default_model:
        _default_model = default_model


async def exec(content: str | UserMessage | None = None, *, model: str | None = None,
               system: str | None = None, tools: Sequence[object] | None = None,
               toolset: str | None = None, tools_source: str | None = None,
               tools_allow: Sequence[str] | None = None, tools_deny: Sequence[str] | None = None,
               tool_choice: ToolChoice | str | dict[str, str] = "auto",
               parallel_tool_calls: bool | None = None, max_iterations: int | None = 20,
               reset_tool_choice: bool = True, messages: list[Message] | None = None,
               steering: MessageSource | None = None, follow_up: MessageSource | None = None,
               steering_mode: QueueMode = "one-at-a-time",
               follow_up_mode: QueueMode = "one-at-a-time", temperature: float | None = None,
               max_tokens: int | None = None, provider: Provider | None = None,
               abort: asyncio.Event | None = None,
               on_event: Callable[[Event], None] | None = None) -> ExecResult:
    """Run the tool loop on ``content`` (after ``messages``, a history to continue).

    ``max_iterations`` caps model rounds (effective cap ``max(1, n)``; None: no cap).
    ``provider`` overrides model resolution (tests, custom backends).
    """
    scope = current_scope.get()
    menu = _menu(tools, toolset, tools_source, tools_allow, tools_deny)
    label = model or (scope.model if scope else _default_model)
    client = None
    if provider is None and scope is not None and model is None:
        provider = scope.provider
    if provider is None:
        provider, client = await _resolve(label)
    model_id = label.split(":", 1)[1] if ":" in label else label
    config = LoopConfig(model=model_id, model_label=label, system=system,
                        tool_choice=_choice(tool_choice), reset_tool_choice=reset_tool_choice,
                        parallel_tool_calls=parallel_tool_calls, max_iterations=max_iterations,
                        steering_mode=steering_mode, follow_up_mode=follow_up_mode,
                        temperature=temperature, max_tokens=max_tokens)
    emit = on_event or _ignore
    if scope is not None:
        config.depth = scope.depth + 1
        config.parent_tool_call_id = scope.tool_call_id
        config.run_id = scope.run_id
        outer = scope.emit
        emit = outer if on_event is None else _tee(outer, on_event)
        abort = abort or scope.abort
    prompts: list[Message] = [] if content is None else [
        content if isinstance(content, UserMessage) else UserMessage(content=content)]
    try:
        outcome = await run_loop(provider=provider, menu=menu, config=config,
                                 context=list(messages or []), emit=emit, prompts=prompts,
                                 steering=steering, follow_up=follow_up, abort=abort)
    finally:
        if client is not None:
            await client.aclose()
    return ExecResult(text=outcome.result, messages=outcome.messages,
                      stop_reason=outcome.stop_reason, usage=outcome.usage, error=outcome.error)


async def stream(content: str | UserMessage | None = None, **kwargs: Any
                 ) -> AsyncIterator[Event]:
    """Like ``exec`` but yields the events as they happen (ends after ``agent_end``)."""
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    user_sink = kwargs.pop("on_event", None)

    def sink(event: Event) -> None:
        queue.put_nowait(event)
        if user_sink is not None:
            user_sink(event)

    task = asyncio.ensure_future(exec(content, on_event=sink, **kwargs))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            yield event
        task.result()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _menu(tools: Sequence[object] | None, toolset: str | None, source: str | None,
          allow: Sequence[str] | None, deny: Sequence[str] | None) -> Menu:
    scope = current_scope.get()
    if tools is None and toolset is None and scope is not None:
        tools = scope.tools  # a nested exec inherits the outer call's menu
    return build_menu(tools=tools, toolset=toolset, tools_source=source, tools_allow=allow,
                      tools_deny=deny)


def _choice(value: ToolChoice | str | dict[str, str]) -> ToolChoice:
    if isinstance(value, ForcedTool):
        return value
    if isinstance(value, dict):
        return ForcedTool(name=value["name"])
    if value in ("auto", "required", "none"):
        return value  # type: ignore[return-value]
    raise ValueError(f"tool_choice must be auto, required, none or a function, got {value!r}")


async def _resolve(label: str) -> tuple[Provider, Any]:
    if _resolver is not None:
        return _resolver(label)[0], None
    import os

    import httpx

    from providers.catalog import Catalog, ProviderSettings

    client = httpx.AsyncClient(timeout=httpx.Timeout(300, connect=10))
    provider, _ = Catalog(client, dict(os.environ), ProviderSettings()).resolve(label)
    return provider, client


def _ignore(event: Event) -> None:
    return None


def _tee(a: Callable[[Event], None], b: Callable[[Event], None]) -> Callable[[Event], None]:
    def both(event: Event) -> None:
        a(event)
        b(event)
    return both
