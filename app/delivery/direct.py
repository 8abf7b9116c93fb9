"""Sending a live SSE stream's frames from the callback that appends them, without waking the
stream's task, whenever the send can complete at once.

A live subscriber used to wake its task for every frame: the tap's future resolved, the task
stepped, the frame generator resumed, the response's loop sent. A caught-up subscriber now
parks its task instead and lets ``LiveFeeds.push`` send the frame in place (``app.delivery.tap``
decides which frames may go this way: the next seq, not the stream's end). An ASGI ``send``
is a coroutine, but the server's completes without suspending unless the client's socket is
full (uvicorn waits for the transport to drain only then), so ``DirectSend`` steps it once::

    push ─ frame ─ DirectSend.send ─ coroutine stepped once ─┬─ finished: sent, no task woken
                                                             ├─ suspended (client not reading):
                                                             │   kept unfinished, task woken,
                                                             │   it finishes it under its
                                                             │   send deadline, then goes on
                                                             └─ raised: kept, task woken, raised

While a send is unfinished, or once the client is gone or the server drains, ``ready`` is
False and frames go to the tap as before, so nothing overtakes an unfinished send. The
coroutine runs in a copy of the stream task's context, as it would inside the task.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Generator
from typing import Any

from starlette.types import Send

__all__ = ["DirectSend"]


class DirectSend:
    """A stream's way to send body chunks from outside its task (see the module docstring).
    Unusable until the response ``attach``es its ``send``."""

    __slots__ = ("_ctx", "_gone", "_send", "_stop", "failed", "unfinished")

    def __init__(self) -> None:
        self._send: Send | None = None
        self._gone: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._ctx: contextvars.Context | None = None
        self.unfinished: _Unfinished | None = None
        """A send that suspended: the task must finish it before it sends anything else."""
        self.failed: Exception | None = None
        """What a send raised: the task raises it."""

    def attach(self, send: Send, gone: asyncio.Event, stop: asyncio.Event) -> None:
        """Called by the response (in its task) once the headers are out."""
        self._send, self._gone, self._stop = send, gone, stop
        self._ctx = contextvars.copy_context()

    def detach(self) -> None:
        """The response is over: nothing more may be sent from outside."""
        self._send = None
        unfinished, self.unfinished = self.unfinished, None
        if unfinished is not None:
            unfinished.close()

    @property
    def ready(self) -> bool:
        """Whether ``send`` may be called now."""
        return (self._send is not None and self.unfinished is None and self.failed is None
                and not self._gone.is_set()  # type: ignore[union-attr]
                and not self._stop.is_set())  # type: ignore[union-attr]

    @property
    def pending(self) -> bool:
        """Whether the task has a send to finish or a failure to raise."""
        return self.unfinished is not None or self.failed is not None

    def send(self, body: bytes, wake: Callable[[], None]) -> None:
        """Send ``body`` now (only when ``ready``); if it cannot finish at once or fails,
        keep it for the task and call ``wake``."""
        assert self._send is not None and self._ctx is not None
        step = self._send({"type": "http.response.body", "body": body,
                           "more_body": True}).__await__()
        try:
            yielded = self._ctx.run(step.send, None)
        except StopIteration:
            return
        except Exception as exc:  # the task raises it, as its own send would have
            self.failed = exc
            wake()
            return
        self.unfinished = _Unfinished(step, yielded)
        wake()

    async def finish(self) -> None:
        """In the stream's task: finish the unfinished send, or raise what a send raised."""
        unfinished, self.unfinished = self.unfinished, None
        if unfinished is not None:
            await unfinished
        failed, self.failed = self.failed, None
        if failed is not None:
            raise failed


class _Unfinished:
    """An already started send (its ``__await__`` iterator), awaitable: awaiting resumes it
    where it suspended."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Generator[Any, Any, None], yielded: Any) -> None:
        self._coro = coro
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, None]:
        coro, value = self._coro, self._yielded
        while True:
            try:
                try:
                    sent = yield value
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # cancelled (the send deadline), or thrown in
                    value = coro.throw(exc)
                else:
                    value = coro.send(sent)
            except StopIteration:
                return

    def close(self) -> None:
        self._coro.close()
