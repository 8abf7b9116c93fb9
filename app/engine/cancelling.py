"""A cancel that a store call swallowed. A cancel that lands in a Redis call while the
client's own socket timeout fires comes out as that timeout, which the client retries (the call
then returns as if nothing happened) or maps to a ``BackendError``; a loop that goes round again
never ends, and the task that cancelled it waits for ever (a worker's shutdown hung so, on its
heartbeat). Background loops call ``raise_if_cancelling`` after each store call, and so do a
run's loop after a queue call (``app.engine.loop``) and its runner once its setup is done
(``app.worker.runner``). (Not for code that runs after catching its own cancel, a runner's
hand-back: it is ``cancelling`` on purpose.)"""

from __future__ import annotations

import asyncio


def raise_if_cancelling() -> None:
    """Raise ``CancelledError`` if this task was asked to stop (the ask still stands)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
