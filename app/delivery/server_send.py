"""The server's ``send``, nearly, for response bodies that no middleware of ours changes.

Every ASGI middleware between the server and a route wraps ``send`` in a coroutine of its own
(starlette's exception handlers twice, CORS for a request with an ``Origin``), and a live SSE
stream calls ``send`` once per frame: coroutine layers per frame that only ever look at the
response's start. ``StashServerSend``, the outermost middleware of ours (only starlette's
error middleware, one thin layer, is outside it), records the ``send`` it is given in the
scope, and ``app.delivery.sse`` sends its body chunks through it (``server_send``); the start and
the end of the response still go down the whole chain, which is all the chain looks at.

Holds only while no middleware of ours rewrites response bodies (gzip would). ``HeadAsGet``
does, for ``HEAD``: the request's own method is recorded with the send, and ``server_send``
gives nothing unless it was ``GET``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

KEY = "agentloop.server_send"


class StashServerSend:
    """Records the ``send`` it is given (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[KEY] = (scope["method"], send)
        await self.app(scope, receive, send)


def server_send(scope: Scope) -> Send | None:
    """The outer ``send`` for this ``GET``'s body chunks, or None (not recorded, or the
    request was not a ``GET``)."""
    found: tuple[str, Send] | None = scope.get(KEY)
    if found is None or found[0] != "GET":
        return None
    return found[1]
