"""``Thread``: a conversation for Python callers, with the service's thread semantics.

::

    chat = Thread(model="demo:echo", toolset="none")
    reply = await chat.send("hello")           # a run from the history; its messages join it
    await chat.send("and then?")               # the next run continues the conversation

At most one run is active. A ``send`` while one is follows ``multitask``: ``enqueue`` (default)
queues a follow-up of the active run, ``steer`` a steering message, ``interrupt`` aborts it
and starts a run from the history once it has ended, ``reject`` raises ``ThreadBusy``. A
message the active run ends without taking starts the next run; it is never lost. Each
``send`` returns the ``ExecResult`` of the run that took its message. Options are those of
``runtime.exec`` (``model``, ``tools``, ``system``, ``provider`` …), fixed per thread.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from app.engine.queues import ListQueue, QueuedMessage
from app.runtime import calls
from app.runtime.calls import ExecResult
from app.store.thread_records import Multitask
from providers.messages import Message, UserMessage

_ids = itertools.count(1)


class ThreadBusy(RuntimeError):
    """``multitask="reject"`` while a run is active."""


@dataclass(slots=True)
class _Run:
    prompts: list[QueuedMessage]
    steering: ListQueue = field(default_factory=ListQueue)
    follow_up: ListQueue = field(default_factory=ListQueue)
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class Thread:
    """See the module docstring. ``messages``: a history to start from."""

    def __init__(self, *, messages: list[Message] | None = None, **options: Any) -> None:
        self.messages: list[Message] = list(messages or [])
        """The conversation so far (runs' messages join it when they end)."""
        self.options = options
        self._active: _Run | None = None
        self._next: _Run | None = None
        self._waiting: dict[str, asyncio.Future[ExecResult]] = {}

    @property
    def busy(self) -> bool:
        """Whether a run is active."""
        return self._active is not None

    async def send(self, content: str | UserMessage, *, multitask: Multitask = "enqueue"
                   ) -> ExecResult:
        """Post a user message; the result of the run that takes it."""
        message = content if isinstance(content, UserMessage) else UserMessage(content=content)
        item = QueuedMessage(id=f"msg_{next(_ids)}", message=message)
        done = asyncio.get_running_loop().create_future()
        self._post(item, multitask)
        self._waiting[item.id] = done
        return await asyncio.shield(done)

    async def idle(self) -> None:
        """Wait until no run is active or waiting."""
        while self._active is not None and self._active.task is not None:
            await asyncio.shield(self._active.task)

    def _post(self, item: QueuedMessage, multitask: Multitask) -> None:
        active = self._active
        if active is None:
            self._start(_Run(prompts=[item]))
        elif multitask == "reject":
            raise ThreadBusy("a run of this thread is active")
        elif self._next is not None:
            self._next.prompts.append(item)
        elif multitask == "interrupt":
            active.abort.set()
            self._next = _Run(prompts=[item])
        else:
            queue = active.steering if multitask == "steer" else active.follow_up
            queue._items.append(item)

    def _start(self, run: _Run) -> None:
        self._active = run
        run.task = asyncio.create_task(self._drive(run))

    async def _drive(self, run: _Run) -> None:
        first, *rest = run.prompts
        run.steering._items.extendleft(reversed(rest))  # taken before the first model call
        try:
            result = await calls.exec(first.message, messages=list(self.messages),
                                        steering=run.steering, follow_up=run.follow_up,
                                        abort=run.abort, **self.options)
        except Exception as exc:
            self._end(run, None, exc)
            return
        self._end(run, result, None)

    def _end(self, run: _Run, result: ExecResult | None, error: Exception | None) -> None:
        """The run's messages join the history; what it never took starts the next run."""
        left = [*run.steering.in_flight, *run.steering._items, *run.follow_up.in_flight,
                *run.follow_up._items]
        if result is not None:
            self.messages += result.messages or [q.message for q in run.prompts]
        upcoming, self._next, self._active = self._next, None, None
        keep = {q.id for q in left} | {q.id for q in (upcoming.prompts if upcoming else [])}
        for message_id in [i for i in self._waiting if i not in keep]:  # this run's
            _settle(self._waiting.pop(message_id), result, error)
        if upcoming is not None:
            upcoming.prompts = left + upcoming.prompts
            self._start(upcoming)
        elif left:
            self._start(_Run(prompts=left))


def _settle(future: asyncio.Future[ExecResult], result: ExecResult | None,
            error: Exception | None) -> None:
    if future.done():
        return
    if result is not None:
        future.set_result(result)
    else:
        future.set_exception(error or RuntimeError("the run failed"))
