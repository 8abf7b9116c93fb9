"""Streaming one assistant message from a provider into loop events.

``stream_assistant`` emits ``message_start`` (an assistant message with empty content), one
``message_update`` per text/thinking/tool-call delta (deltas only), then ``message_end`` with the
complete message. A provider that raises, or whose stream ends without ``done``/``error``, gives
a message with stop reason ``error``; an abort closes the stream and gives ``aborted``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from app.events import Event, MessageEnd, MessageStart, MessageUpdate
from providers.accumulate import Accumulator
from providers.base import ModelRequest, Provider
from providers.events import (
    ProviderEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from providers.messages import AssistantMessage, ToolCall

log = logging.getLogger(__name__)

CANCELLED = "Run cancelled"


class Abortable:
    """Runs one task at a time that the run's abort signal cancels.

    One watcher task per loop run (not one waiter per model call or tool): when ``abort`` is
    set it cancels whatever task is current; a task started after that is cancelled at once.
    ``close`` ends the watcher. Timeline::

        run(stream task) ──────────────── done ─ run(tool task) ──╳ cancelled ─▶ False
        watcher ─ abort.wait() ──────────────────────── set ─┘ cancel current
    """

    def __init__(self, abort: asyncio.Event) -> None:
        self.abort = abort
        self._current: asyncio.Future[Any] | None = None
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        await self.abort.wait()
        if self._current is not None:
            self._current.cancel()

    async def run(self, task: asyncio.Future[Any]) -> bool:
        """Wait for ``task``; True when it finished on its own, False when the abort cancelled
        it. Cancelling the caller cancels the task too (and propagates)."""
        if self.abort.is_set():
            task.cancel()
        self._current = task
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (current is not None and current.cancelling()) or not task.cancelled():
                raise  # we are being cancelled ourselves, not just the task we cancelled
            return False
        finally:
            self._current = None
        return True

    def close(self) -> None:
        """Stop watching (the loop run is over)."""
        self._watcher.cancel()


async def stream_assistant(provider: Provider, request: ModelRequest,
                           emit: Callable[[Event], None], abort: Abortable
                           ) -> tuple[AssistantMessage, dict[str, str]]:
    """One model call as events; returns the message and ``{tool_call_id: bad-args reason}``."""
    acc = Accumulator(provider.name, request.model)
    started: list[bool] = []
    task = asyncio.ensure_future(_consume(provider, request, acc, emit, started))
    if not await abort.run(task):
        acc.abort(CANCELLED)
    if not started:
        _start(acc, emit, started)
    message = acc.message
    emit(MessageEnd(message=message))
    return message, acc.invalid_args


def _start(acc: Accumulator, emit: Callable[[Event], None], started: list[bool]) -> None:
    started.append(True)
    msg = acc.message
    emit(MessageStart(message=AssistantMessage(provider=msg.provider, model=msg.model,
                                               timestamp=msg.timestamp)))


async def _consume(provider: Provider, request: ModelRequest, acc: Accumulator,
                   emit: Callable[[Event], None], started: list[bool]) -> None:
    stream = provider.stream(request)
    try:
        async for event in stream:
            if not started:
                _start(acc, emit, started)
            acc.apply(event)
            delta = _delta(event, acc)
            if delta is not None:
                emit(MessageUpdate(delta=delta))
            if acc.finished:
                break
        if not acc.finished:
            acc.fail("the provider stream ended without a final event")
    except Exception as exc:  # a provider bug: the contract says it never raises
        log.warning("provider %s raised: %r", provider.name, exc)
        acc.fail(f"provider error: {type(exc).__name__}: {exc}")
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def _delta(event: ProviderEvent, acc: Accumulator) -> dict[str, Any] | None:
    if isinstance(event, TextDelta | ThinkingDelta):
        return {"kind": event.type, "content_index": acc.position(event.content_index),
                "text": event.delta}
    if not isinstance(event, ToolCallStart | ToolCallDelta | ToolCallEnd):
        return None
    pos = acc.position(event.content_index)
    call = acc.message.content[pos]
    assert isinstance(call, ToolCall)
    delta: dict[str, Any] = {"kind": event.type, "content_index": pos, "tool_call_id": call.id,
                             "tool_name": call.name}
    if isinstance(event, ToolCallDelta):
        delta["text"] = event.delta
        delta["arguments"] = call.arguments
    elif isinstance(event, ToolCallEnd):
        delta["arguments"] = call.arguments
    return delta
