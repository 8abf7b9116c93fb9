"""A cancel that a store call swallowed: a ``BackendError`` can come out of a call that a
cancel interrupted (a timeout inside the client firing with it), and a loop that logs the
error and goes round again would never end; the task that cancelled it then waits for ever.
Loops that catch store errors call ``raise_if_cancelling`` in their handler."""

from __future__ import annotations

import asyncio


def raise_if_cancelling() -> None:
    """Raise ``CancelledError`` if this task was asked to stop (the ask still stands)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
