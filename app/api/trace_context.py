"""The caller's W3C ``traceparent`` (``AGENTLOOP_OTEL``): an ASGI middleware keeps a valid one
for the request's duration, and the run pipeline stores it with the run it creates, at every
door, as the parent of the run's spans (``app.telemetry.traces``). Off (no middleware), runs
store none and nothing here costs anything."""

from __future__ import annotations

import re
from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

_INCOMING: ContextVar[str | None] = ContextVar("traceparent", default=None)
TRACEPARENT = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$")
"""Version 00 of the W3C header (an invalid one is ignored, as the specification asks)."""


def incoming_traceparent() -> str | None:
    """The current request's valid ``traceparent``, if it sent one."""
    return _INCOMING.get()


class TraceParent:
    """Keep the request's ``traceparent`` header where the pipeline reads it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        value = next((v.decode("latin-1").strip().lower() for k, v in scope["headers"]
                      if k == b"traceparent"), None)
        token = _INCOMING.set(value if value and TRACEPARENT.match(value) else None)
        try:
            await self.app(scope, receive, send)
        finally:
            _INCOMING.reset(token)
