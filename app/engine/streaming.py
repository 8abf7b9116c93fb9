"""Streaming one assistant message from a provider into loop events.

``stream_assistant`` emits ``message_start`` (an assistant message with empty content), one
``message_update`` per text/thinking/tool-call delta (deltas only), then ``message_end`` with the
complete message. A provider that raises (``CancelledError`` included, when nobody cancelled
the run; ``SystemExit`` or any other ``BaseException`` too), or whose stream ends without
``done``/``error``, gives a message with stop reason ``error``; an abort closes the stream and
gives ``aborted``; a run deadline that passes closes it and gives ``error`` saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from app.engine.events import Event, MessageEnd, MessageStart, MessageUpdate
from app.engine.failures import base_exception_text, stopping_for_real
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
GRACE = 2.0
"""Seconds a stopped task running a nested loop gets to end it on its own (the nested loop
watches the same signal and writes its ends) before it is cancelled."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a run must be over: ``at`` (wall-clock epoch seconds, so it holds across a resume
    on another worker) and the ``seconds`` it was given (for the messages)."""

    at: float
    seconds: float

    def error(self) -> str:
        """The run's ``error`` once the deadline has passed."""
        return (f"run timed out: it passed its deadline of {self.seconds:g} s "
                "(the run's timeout) and was stopped")

    def tool_note(self) -> str:
        """The result of a tool call the deadline stopped or skipped."""
        return f"Tool execution stopped: the run passed its deadline of {self.seconds:g} s."


class Abortable:
    """Runs one task at a time that the run's stop signal cancels.

    The run stops when ``abort`` is set (a cancel) or once its ``deadline`` passes. One watcher
    task per loop run (not one waiter per model call or tool) then sets ``signal`` (what tools
    and nested loops watch; ``abort`` itself when there is no deadline, so a deadline never sets
    the caller's event) and cancels whatever task is current; a task started after that is
    cancelled at once. ``expired`` says the deadline was the cause. ``close`` ends the watcher.
    Timeline::

        run(stream task) ──────────────── done ─ run(tool task) ──╳ cancelled ─▶ False
        watcher ─ abort.wait() / deadline ───────────── set ─┘ signal set, cancel current
    """

    def __init__(self, abort: asyncio.Event, deadline: Deadline | None = None) -> None:
        self.abort = abort
        self.deadline = deadline
        self.expired = deadline is not None and deadline.at <= time.time()
        self.signal = abort if deadline is None else asyncio.Event()
        if self.expired or abort.is_set():  # already past or cancelled: stop before the
            self.signal.set()                  # first step (a resumed or woken run)
        self._current: asyncio.Future[Any] | None = None
        self._spare: Callable[[], bool] | None = None
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        if self.deadline is None:
            await self.abort.wait()
        else:
            try:
                async with asyncio.timeout(self.deadline.at - time.time()):
                    await self.abort.wait()
            except TimeoutError:
                self.expired = True
            self.signal.set()
        current = self._current
        if current is not None and self._spare is not None and self._spare():
            await asyncio.wait({current}, timeout=GRACE)  # a nested loop ends on its own
        if current is not None and not current.done():
            current.cancel()

    def stop_reason(self) -> tuple[Literal["error", "aborted"], str]:
        """How a run the signal stopped ends: ``error`` past its deadline, else ``aborted``."""
        if self.expired and self.deadline is not None:
            return "error", self.deadline.error()
        return "aborted", CANCELLED

    async def run(self, task: asyncio.Future[Any], spare: Callable[[], bool] | None = None
                  ) -> bool:
        """Wait for ``task``; True when it finished on its own, False when the stop signal
        cancelled it. Cancelling the caller cancels the task too (and propagates). ``spare()``
        true when the signal comes: the task gets ``GRACE`` seconds to end first."""
        if self.signal.is_set():
            task.cancel()
        self._current, self._spare = task, spare
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (current is not None and current.cancelling()) or not task.cancelled():
                raise  # we are being cancelled ourselves, not just the task we cancelled
            return False
        finally:
            self._current = self._spare = None
        return True

    def close(self) -> None:
        """Stop watching (the loop run is over)."""
        self._watcher.cancel()


async def stream_assistant(provider: Provider, request: ModelRequest,
                           emit: Callable[[Event], None], abort: Abortable,
                           taken_ids: set[str] | None = None
                           ) -> tuple[AssistantMessage, dict[str, str]]:
    """One model call as events; returns the message and ``{tool_call_id: bad-args reason}``.

    ``taken_ids``: the run's tool-call ids so far (the new calls' ids are added; see
    ``providers.accumulate``)."""
    acc = Accumulator(provider.name, request.model, taken_ids=taken_ids)
    started: list[bool] = []
    task = asyncio.ensure_future(_consume(provider, request, acc, emit, started))
    if not await abort.run(task):
        reason, error = abort.stop_reason()
        if reason == "error":
            acc.fail(error)
        else:
            acc.abort(error)
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
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # the run is being stopped
        log.warning("provider %s raised CancelledError", provider.name)
        acc.fail("provider error: the provider stream raised CancelledError (the run was not "
                 "cancelled)")
    except Exception as exc:  # a provider bug: the contract says it never raises
        log.warning("provider %s raised: %r", provider.name, exc)
        acc.fail(f"provider error: {type(exc).__name__}: {exc}")
    except BaseException as exc:  # SystemExit & co. would stop the worker's event loop
        if stopping_for_real(exc):
            raise
        log.warning("provider %s raised %s", provider.name, type(exc).__name__)
        acc.fail(f"provider error: {base_exception_text(exc)}")
    finally:
        await _close(stream)


async def _close(stream: object) -> None:
    """Close the provider's stream; a failure closing it changes nothing of the message."""
    aclose = getattr(stream, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        if stopping_for_real(exc):
            raise
        log.warning("closing the provider stream raised %s", type(exc).__name__)


_TEXT = (TextDelta, ThinkingDelta)
_CALL = (ToolCallStart, ToolCallDelta, ToolCallEnd)
"""Kept as tuples: ``isinstance(x, A | B)`` builds the union on every call (a frame's)."""


def _delta(event: ProviderEvent, acc: Accumulator) -> dict[str, Any] | None:
    if isinstance(event, _TEXT):
        return {"kind": event.type, "content_index": acc.position(event.content_index),
                "text": event.delta}
    if not isinstance(event, _CALL):
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
