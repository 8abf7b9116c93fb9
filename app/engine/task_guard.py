"""Tasks a tool starts cannot stop the service's event loop.

``run_tool`` turns a ``SystemExit`` or ``KeyboardInterrupt`` from a tool body into an error
result, but a tool may also start tasks of its own (``asyncio.create_task`` inside an async
tool, a library that spawns a background task). asyncio re-raises those two exceptions from a
task straight out of the event loop, stopping it, and with it the worker process and every run
on it, whether anyone awaits the task or not.

``install_task_guard`` sets a task factory on the service's loop: a task created while a tool
body runs (``current_scope`` is set; tasks inherit the context they are created in) has its
coroutine wrapped so that these exceptions end that task as a ``RuntimeError`` naming them. An
awaiting tool sees that error (and its call becomes an ``is_error`` result as usual); a task
nobody awaits is logged by asyncio's exception handler. Tasks of the service itself are left
as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

from app.engine.failures import base_exception_text
from app.engine.tool_exec import current_scope

T = TypeVar("T")


class ToolTaskExit(RuntimeError):
    """A task started by a tool raised ``SystemExit`` or ``KeyboardInterrupt``."""


async def _contained(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as exc:
        raise ToolTaskExit(f"a task started by a tool raised {base_exception_text(exc)}") \
            from exc


def install_task_guard(loop: asyncio.AbstractEventLoop) -> None:
    """Wrap the coroutines of tasks that tool bodies create on ``loop`` (idempotent; keeps a
    task factory already set)."""
    previous = loop.get_task_factory()
    if getattr(previous, "agentloop_guard", False):
        return

    def factory(loop: asyncio.AbstractEventLoop,
                coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
                **kwargs: Any) -> asyncio.Future[Any]:
        inner = coro
        if current_scope.get() is not None and asyncio.iscoroutine(coro):
            coro = _contained(coro)
        task = previous(loop, coro, **kwargs) if previous is not None \
            else asyncio.Task(coro, loop=loop, **kwargs)
        if coro is not inner:  # cancelled before its first step: the wrapper never awaited
            # ``inner``; closing it then keeps "coroutine was never awaited" away (a no-op on a
            # finished coroutine)
            task.add_done_callback(lambda _: inner.close())
        return task

    factory.agentloop_guard = True  # type: ignore[attr-defined]
    loop.set_task_factory(factory)
