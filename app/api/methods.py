"""HTTP methods per path: ``HEAD`` wherever ``GET`` is, and a ``405`` that lists them all.

Starlette answers a wrong method with the ``Allow`` of the first route whose path matched, so
``PUT /runs`` said ``Allow: POST`` though ``GET /runs`` exists; ``allowed_methods`` unions every
route of the path. FastAPI's routes answer ``HEAD`` with 405; ``HeadAsGet`` runs the ``GET``
route and sends its status and headers without the body. A streaming ``GET`` (the events route)
is ended right after its headers: the response is complete, so the server reports the client
gone and the stream stops instead of tailing a live run for a body nobody reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """Every method some route serves at the request's path (``HEAD`` wherever ``GET`` is)."""
    methods = {m for m in ORDER if _served(routes, scope, m)}
    if "GET" in methods:
        methods.add("HEAD")
    return [m for m in ORDER if m in methods]


def _served(routes: Sequence[BaseRoute], scope: Scope, method: str) -> bool:
    """Whether a route takes ``method`` at the request's path (routes' own matching, which
    also sees into included routers)."""
    probe = {**scope, "method": method}
    return any(route.matches(probe)[0] is Match.FULL for route in routes)


class HeadAsGet:
    """``HEAD`` served by the path's ``GET`` route: status and headers, no body."""

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        if _served(self.routes, scope, "HEAD") or not _served(self.routes, scope, "GET"):
            await self.app(scope, receive, send)
            return
        await _HeadExchange(receive, send).serve(self.app, {**scope, "method": "GET"})


class _HeadExchange:
    """One ``HEAD`` request run as ``GET``: the body is dropped and the response ends with its
    headers; from then on the app is told the client has gone."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self.ended = False

    async def serve(self, app: ASGIApp, scope: Scope) -> None:
        await app(scope, self.receive, self.send)

    async def receive(self) -> Message:
        if self.ended:
            return {"type": "http.disconnect"}
        return await self._receive()

    async def send(self, message: Message) -> None:
        if self.ended:
            return
        if message["type"] == "http.response.start":
            await self._send(message)
        elif message["type"] == "http.response.body":
            self.ended = True
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
