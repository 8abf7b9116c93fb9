"""The lean routes answered before FastAPI's router looks for a route.

FastAPI 0.165 routes a request by walking its included routers twice (once to match each
inclusion, once more inside the chosen one), keeping per-inclusion context in the scope as it
goes: of ``GET /runs/{id}/events``' time in the app, about a third (in-process, cProfile).
Every run starts with ``POST /runs`` and ``GET /runs/{id}/events``, and when many runs start
at once each run's first event waits for the others' requests on one loop.

``front_routes`` makes, for each lean route (``app.api.routes.lean``: a route with a binder),
a plain Starlette route for the same path and methods, answered by the same lean handler;
``create_app`` puts them first in the app's routes. Such a route matches only a request for
exactly its path and one of its methods: anything else (``HEAD``, another method, a trailing
slash) is not matched here and goes through FastAPI's routing as before, so ``405``,
``HEAD`` and redirects are unchanged. Everything outside the router (middleware, the error
handlers) sees the same request; the declared route stays for OpenAPI.

``tests/api/test_lean_routes.py`` checks that these requests are answered here and that the
answers are FastAPI's own handler's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter
from starlette._utils import get_route_path
from starlette.datastructures import URLPath
from starlette.routing import BaseRoute, Match, NoMatchFound, compile_path
from starlette.routing import request_response as starlette_request_response
from starlette.types import Receive, Scope, Send

from app.api.routes.lean import LeanRoute, has_binder


class FrontRoute(BaseRoute):
    """A lean route's path and methods, answered by its lean handler."""

    def __init__(self, route: LeanRoute) -> None:
        self.route = route
        self.path = route.path
        self.methods = frozenset(route.methods or ())
        self.path_regex, self.path_format, self.param_convertors = compile_path(route.path)
        self.app = starlette_request_response(route.get_route_handler())

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """FULL for this path with one of the route's own methods; otherwise NONE (never
        PARTIAL: the routes behind decide what a wrong method gets)."""
        if scope["type"] != "http" or scope["method"] not in self.methods:
            return Match.NONE, {}
        found = self.path_regex.match(get_route_path(scope))
        if found is None:
            return Match.NONE, {}
        params = {k: self.param_convertors[k].convert(v) for k, v in found.groupdict().items()}
        return Match.FULL, {"endpoint": self.route.endpoint, "route": self.route,
                            "path_params": {**scope.get("path_params", {}), **params}}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        """Never this route's: ``url_path_for`` finds the declared route behind it."""
        raise NoMatchFound(name, path_params)

    def __repr__(self) -> str:
        return f"FrontRoute(path={self.path!r}, methods={sorted(self.methods)!r})"


def front_routes(routers: Iterable[APIRouter]) -> list[BaseRoute]:
    """A ``FrontRoute`` for every lean route of ``routers`` that has a binder."""
    return [FrontRoute(r) for router in routers for r in router.routes
            if isinstance(r, LeanRoute) and has_binder(r)]

