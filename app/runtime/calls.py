"""``runtime.exec`` and ``runtime.stream``: the loop for Python callers and nested tools.

Tools are on by default: with neither ``tools`` nor ``toolset`` a call gets the full registry
toolset; ``toolset="none"`` or ``tools=[]`` makes a pure text call. Outside the service the first
call loads the tools the service would (the built-ins and ``AGENTLOOP_TOOL_MODULES``), and models
resolve exactly as in the service (``app.process.setup.model_resolver``: the catalog, the
``AGENTLOOP_OPENAI_PROFILES``, ``AGENTLOOP_PROVIDER_FACTORY``), with the same defaults
(``AGENTLOOP_DEFAULT_MODEL``, ``AGENTLOOP_DEFAULT_MAX_TOKENS``, ``AGENTLOOP_RUN_TIMEOUT``).
Called inside a tool body, ``exec`` inherits the outer call's tools, model, provider and model
resolver, and its events go to the outer sink with ``depth`` + 1 and the parent
``tool_call_id``; cancelling the outer run (or its deadline passing) stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.config import Settings, load_settings, provider_env
from app.engine import LoopConfig, Resume, run_loop
from app.engine.approvals import Ask, exec_gate
from app.engine.events import Event
from app.engine.nested import NestedLoop
from app.engine.output import check_format, format_from_option
from app.engine.queues import MessageSource, QueueMode
from app.engine.streaming import Deadline
from app.engine.tool_exec import NestedParked, ToolScope, current_scope
from providers.base import ForcedTool, Provider, ResponseFormat, ToolChoice
from providers.messages import Message, Usage, UserMessage
from tool_registry import Menu, build_menu, default_registry

Resolver = Callable[[str], tuple[Provider, str]]
_resolver: Resolver | None = None
_default_model: str | None = None


@dataclass(slots=True, kw_only=True)
class ExecResult:
    """What ``exec`` returns: the final text, the messages it added, why it stopped, and
    under a ``response_format`` the final answer parsed (``output``; None unless ``stop``)."""

    text: str | None
    messages: list[Message]
    stop_reason: str
    usage: Usage
    error: str | None
    output: dict[str, Any] | None = None


def configure(resolver: Resolver | None, default_model: str | None = None) -> None:
    """Set how model strings become providers, overriding the settings-built resolver."""
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
               max_tokens: int | None = None,
               timeout: float | None = None,  # noqa: ASYNC109 - ends the run with agent_end
               provider: Provider | None = None, abort: asyncio.Event | None = None,
               on_event: Callable[[Event], None] | None = None,
               approval: Sequence[str] | str | None = None,
               on_approval: Ask | None = None,
               response_format: Mapping[str, Any] | ResponseFormat | None = None
               ) -> ExecResult:
    """Run the tool loop on ``content`` (after ``messages``, a history to continue).

    ``max_iterations`` caps model rounds (effective cap ``max(1, n)``; None: no cap).
    ``max_tokens`` unset: ``AGENTLOOP_DEFAULT_MAX_TOKENS``. ``timeout``: seconds before the
    call is stopped with ``stop_reason`` ``error``; unset: ``AGENTLOOP_RUN_TIMEOUT`` for a
    top-level call, none of its own for a nested one (the outer run's deadline applies).
    ``provider`` overrides model resolution (tests, custom backends). A forced ``tool_choice``
    naming a tool that is not on the menu raises ``ValueError``. ``approval`` (tool or toolset
    names, or ``"all"``/``"unsafe"``) adds picks that need approval to the tools' own;
    ``on_approval(WaitingCall)`` (sync or async) answers each with True/False or a
    ``Decision``; without it such picks are denied by a top-level call, while a nested call
    in a service run parks the whole run (``app.engine.nested``: the tool body runs again
    when the run is woken, and this call goes on from where its loop stopped).
    ``response_format`` (OpenAI's ``{"type": "json_schema", "json_schema": {name, schema,
    strict?}}`` or a ``ResponseFormat``) holds the final answer to a schema: the result's
    ``output`` is it parsed, ``stop_reason`` ``output_invalid`` when it stayed invalid after
    one corrective retry (``app.engine.output``); a schema agentloop cannot validate, or a
    ``strict`` one that is not strict-compatible, raises ``ValueError``.
    """
    scope = current_scope.get()
    settings = load_settings()
    if scope is None:
        from app.process.setup import ensure_tools

        ensure_tools(settings)
    menu = _menu(tools, toolset, tools_source, tools_allow, tools_deny, settings)
    fmt = _format(response_format)
    choice = _choice(tool_choice)
    _check_forced(choice, menu)
    label = model or (scope.model if scope else _default_label(settings))
    resolve, owned = _resolver_for(scope, settings)
    if provider is None and scope is not None and model is None:
        provider = scope.provider
    try:
        if provider is None:
            provider = resolve(label)[0]
        config = LoopConfig(model=label.split(":", 1)[1] if ":" in label else label,
                            model_label=label, system=system, tool_choice=choice,
                            reset_tool_choice=reset_tool_choice,
                            parallel_tool_calls=parallel_tool_calls,
                            max_iterations=max_iterations, steering_mode=steering_mode,
                            follow_up_mode=follow_up_mode, temperature=temperature,
                            max_tokens=max_tokens or settings.default_max_tokens or None,
                            deadline=_deadline(timeout, scope, settings), resolve=resolve,
                            tool_timeout=settings.tool_timeout,
                            max_result_chars=settings.max_result_chars,
                            response_format=fmt)
        outer = scope.config.gate if scope is not None and scope.config is not None else None
        config.gate = exec_gate(approval, default_registry, on_approval, outer)
        emit = on_event or _ignore
        context = list(messages or [])
        prompts: list[Message] = [] if content is None else [
            content if isinstance(content, UserMessage) else UserMessage(content=content)]
        resume: Resume | None = None
        if scope is not None:
            emit, abort = _nest(config, scope, on_event, abort)
            logged = _logged(config, scope)
            if logged is not None and logged.ended is not None:  # it ended before the park
                text, added, reason, usage, error, output = logged.exec_result()
                return ExecResult(text=text, messages=added, stop_reason=reason, usage=usage,
                                  error=error, output=output)
            if logged is not None:  # it parked the run: go on from where it stopped
                resume, prompts = logged.resume(), []
                context += logged.messages
        if scope is not None:
            scope.live += 1
        try:
            outcome = await run_loop(provider=provider, menu=menu, config=config,
                                     context=context, emit=emit, prompts=prompts,
                                     steering=steering, follow_up=follow_up, abort=abort,
                                     resume=resume)
        finally:
            if scope is not None:
                scope.live -= 1
        if outcome.parked and scope is not None:  # the whole run parks (app.engine.nested)
            scope.parked = list(outcome.parked)
            raise NestedParked(f"{len(outcome.parked)} nested picks wait for a person")
    finally:
        if owned is not None:
            await owned.aclose()
    return ExecResult(text=outcome.result, messages=outcome.messages,
                      stop_reason=outcome.stop_reason, usage=outcome.usage, error=outcome.error,
                      output=outcome.output)


def _nest(config: LoopConfig, scope: ToolScope, on_event: Callable[[Event], None] | None,
          abort: asyncio.Event | None) -> tuple[Callable[[Event], None], asyncio.Event]:
    """A nested call: one level deeper, the outer sink, the outer stop signal, run-unique ids."""
    config.depth = scope.depth + 1
    config.parent_tool_call_id = scope.tool_call_id
    config.run_id = scope.run_id
    outer = scope.config
    if outer is not None:
        config.call_ids, config.replay = outer.call_ids, outer.replay
        config.shared = outer.shared
        config.tool_timeout, config.max_result_chars = outer.tool_timeout, outer.max_result_chars
    emit = scope.emit if on_event is None else _tee(scope.emit, on_event)
    return emit, abort or scope.abort


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
          allow: Sequence[str] | None, deny: Sequence[str] | None, settings: Settings) -> Menu:
    """The call's menu under the service's gating (``AGENTLOOP_DISABLED_TOOLS``, the
    ``requires_env`` variables), nested calls included."""
    scope = current_scope.get()
    if tools is None and toolset is None and scope is not None:
        tools = scope.tools  # a nested exec inherits the outer call's menu
    return build_menu(tools=tools, toolset=toolset, tools_source=source, tools_allow=allow,
                      tools_deny=deny, disabled=settings.disabled_tool_list(),
                      env=provider_env())


def _check_forced(choice: ToolChoice, menu: Menu) -> None:
    if isinstance(choice, ForcedTool) and choice.name not in menu.tools:
        raise ValueError(f"tool_choice names {choice.name!r}, which is not on this call's menu "
                         f"(tools: {sorted(menu.tools)})")


def _format(value: Mapping[str, Any] | ResponseFormat | None) -> ResponseFormat | None:
    """The call's response format, checked (``ValueError`` saying what is wrong)."""
    if isinstance(value, Mapping):
        kind = value.get("type")
        spec = value.get("json_schema")
        if kind not in ("json_schema", "text") or (
                kind == "json_schema" and not (isinstance(spec, Mapping) and "name" in spec
                                               and "schema" in spec)):
            raise ValueError('response_format must be {"type": "json_schema", "json_schema": '
                             '{"name": ..., "schema": {...}}} or {"type": "text"}')
    fmt = format_from_option(value)
    if fmt is not None:
        check_format(fmt)
    return fmt


def _choice(value: ToolChoice | str | dict[str, str]) -> ToolChoice:
    if isinstance(value, ForcedTool):
        return value
    if isinstance(value, dict):
        return ForcedTool(name=value["name"])
    if value in ("auto", "required", "none"):
        return value  # type: ignore[return-value]
    raise ValueError(f"tool_choice must be auto, required, none or a function, got {value!r}")


def _default_label(settings: Settings) -> str:
    if _default_model is not None:
        return _default_model
    from app.process.setup import served_default_model

    return served_default_model(settings, provider_env())


def _resolver_for(scope: ToolScope | None,
                  settings: Settings) -> tuple[Resolver, _SettingsResolver | None]:
    """The resolver to use, and the one to close afterwards (None when borrowed): the calling
    run's, else the configured one, else one built from the settings like the service's."""
    outer = scope.config if scope is not None else None
    if outer is not None and outer.resolve is not None:
        return outer.resolve, None
    if _resolver is not None:
        return _resolver, None
    owned = _SettingsResolver(settings)
    return owned, owned


class _SettingsResolver:
    """``app.process.setup.model_resolver`` over its own HTTP client, both made on first use (a
    call given its own ``provider`` needs neither)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: httpx.AsyncClient | None = None
        self._resolve: Resolver | None = None

    def __call__(self, spec: str) -> tuple[Provider, str]:
        if self._resolve is None:
            from app.process.setup import model_resolver, provider_client

            env = provider_env()
            self._client = provider_client(self._settings, env)
            self._resolve = model_resolver(self._settings, env, self._client)
        return self._resolve(spec)

    async def aclose(self) -> None:
        """Close the client, if one was made."""
        if self._client is not None:
            await self._client.aclose()


def _deadline(timeout: float | None, scope: ToolScope | None,
              settings: Settings) -> Deadline | None:
    seconds = timeout if timeout is not None else (
        None if scope is not None else settings.run_timeout)
    if not seconds:
        return None
    return Deadline(at=time.time() + seconds, seconds=seconds)


def _logged(config: LoopConfig, scope: ToolScope) -> NestedLoop | None:
    """What the log holds of this exec of the tool body (matched by the calling tool call and
    the exec's ordinal in its body) when the run was woken from a park; else None."""
    ordinal, scope.execs = scope.execs, scope.execs + 1
    if config.replay is None:
        return None
    return config.replay.loop(scope.tool_call_id, ordinal)


def _ignore(event: Event) -> None:
    return None


def _tee(a: Callable[[Event], None], b: Callable[[Event], None]) -> Callable[[Event], None]:
    def both(event: Event) -> None:
        a(event)
        b(event)
    return both

