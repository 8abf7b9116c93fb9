"""Event streams end when the server shuts down, so a rolling restart does not wait for them.

uvicorn's graceful shutdown stops accepting, then waits (up to ``timeout_graceful_shutdown``)
for every open response to finish before the app's lifespan shutdown (which hands the embedded
worker's runs back). An SSE stream of a live run or of a thread never finishes on its own, so
every open stream held a restart for the whole timeout and was then cut. ``DrainingServer``
marks its loop as draining first; ``EventStreamResponse`` ends a stream at its next frame or
ping (within ``min(ping, 5)`` s) with a clean end of body, and the client reconnects with
``Last-Event-ID`` to another replica, losing nothing (the log is in the store)::

    SIGTERM ─ DrainingServer.shutdown ─ draining ─ streams end (≤ 5 s) ─ connections close
      ─ lifespan shutdown (worker hands back) ─ exit
"""

from __future__ import annotations

import asyncio
import socket
import weakref

import uvicorn

_draining: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Event] = (
    weakref.WeakKeyDictionary())


def draining() -> asyncio.Event:
    """The running loop's draining flag (one per loop: tests run servers on several)."""
    loop = asyncio.get_running_loop()
    event = _draining.get(loop)
    if event is None:
        event = _draining[loop] = asyncio.Event()
    return event


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` that marks its loop as draining before the graceful shutdown."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        draining().set()
        await super().shutdown(sockets=sockets)
