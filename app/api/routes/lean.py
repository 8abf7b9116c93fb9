"""The two requests every run starts with, bound without FastAPI's generic request handling.

A browser starts a run with ``POST /runs`` and ``GET /runs/{id}/events``, on a new connection.
FastAPI 0.165 resolves each request's parameters generically, re-reading every parameter's
declaration per request: of ``POST /runs``' 276 µs in the app, ~100 µs. When 50 runs start
together (a closed loop at C=50, many users pressing send at once) those costs add up within
one loop, and each run's first event waits for the wave. An upper bound measured with both
requests served straight off the ASGI scope: first event p50 0.68×, p99 0.53× (issue 33).

``LeanRoute`` keeps a route exactly as declared (path, OpenAPI, the middleware around it, the
error handlers) and swaps only its request handler for one that binds what FastAPI would for
these signatures, in FastAPI's order:

    body read: not JSON ─ 400 invalid_json (before authentication, as FastAPI does)
    ─ dependencies: the services, the caller (401, 429)
    ─ parameters: a path ``str``, query and header ``str | None`` (the last query value, the
      first header value), one JSON body model (errors at ``("body", ...)``: 422)
    ─ the endpoint ─ its response model dumped as FastAPI's fast path dumps it, the status and
      headers it set on ``response`` applied

A route whose endpoint has no binder here is handled by FastAPI as before. Measured with the
route-level handler (``bench/ab_production.py``, 5 rounds): first event p99 0.82× on memory and
0.71× on Redis, p50 0.97× and 0.81×. ``tests/api/test_lean_routes.py`` sends the same requests
through this handler and through FastAPI's own for the same route and compares the answers, so
a FastAPI release that answers differently fails there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError

from app.api.routes.deps import caller, get_services
from app.api.routes.strict_json import StrictJsonRequest, StrictJsonRoute
from app.api.schemas import CreateRun

M = TypeVar("M", bound=BaseModel)

Bind = Callable[[Request, Response], Awaitable[Any]]
"""Binds a request's arguments, calls the endpoint, returns what it returned."""
_BINDERS: dict[Callable[..., Any], Callable[[Callable[..., Any]], Bind]] = {}


def lean(make: Callable[[Callable[..., Any]], Bind]) -> Callable[[Callable[..., Any]], Any]:
    """Register ``make(endpoint)`` as the binder of the decorated endpoint (put it under the
    route decorator, so the route is made with the binder known)."""
    def register(endpoint: Callable[..., Any]) -> Callable[..., Any]:
        _BINDERS[endpoint] = make
        return endpoint
    return register


NO_BODY = object()
"""An empty body (JSON ``null`` is a body, and fails as one)."""


async def json_body(request: Request) -> Any:
    """The body as FastAPI reads it for a JSON body model: ``NO_BODY`` when there is none
    (the body guard has already refused other media types with 415), else parsed JSON;
    malformed JSON is FastAPI's ``json_invalid`` error."""
    raw = await request.body()
    if not raw:
        return NO_BODY
    try:
        return await request.json()  # a StrictJsonRequest: orjson, depth-checked
    except ValueError as exc:  # orjson.JSONDecodeError is a json.JSONDecodeError
        pos = getattr(exc, "pos", 0)
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", pos), "msg": "JSON decode error",
              "input": {}, "ctx": {"error": getattr(exc, "msg", str(exc))}}],
            body=getattr(exc, "doc", raw)) from exc


def body_model(model: type[M], value: Any) -> M:
    """``value`` as ``model``, or FastAPI's validation error for a required body (FastAPI
    validates with ``from_attributes``, which names a non-object body's error)."""
    if value is NO_BODY:
        raise RequestValidationError([{"type": "missing", "loc": ("body",),
                                       "msg": "Field required", "input": None}], body=None)
    try:
        return model.model_validate(value, from_attributes=True)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])}
                  for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors, body=value) from None


def has_binder(route: APIRoute) -> bool:
    """Whether ``route``'s endpoint has a binder (its requests are handled lean)."""
    return route.endpoint in _BINDERS


class LeanRoute(StrictJsonRoute):
    """An ``APIRoute`` whose request handler is its endpoint's binder, when it has one."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        make = _BINDERS.get(self.endpoint)
        if make is None:
            return super().get_route_handler()
        bind = make(self.endpoint)
        model = self.response_model
        adapter: TypeAdapter[Any] | None = TypeAdapter(model) if model is not None else None
        status = self.status_code

        async def handle(plain: Request) -> Response:
            request = StrictJsonRequest(plain.scope, plain.receive)
            sub = Response()  # what the endpoint's ``response`` parameter sets, as FastAPI's
            del sub.headers["content-length"]
            sub.status_code = None  # type: ignore[assignment]  # FastAPI's "not set"
            result = await bind(request, sub)
            if isinstance(result, Response):
                return result
            content = (adapter.dump_json(adapter.validate_python(result), by_alias=True)
                       if adapter is not None else result)
            response = Response(content=content, media_type="application/json",
                                status_code=sub.status_code or status or 200)
            response.headers.raw.extend(sub.headers.raw)
            return response

        return handle


def bind_create_run(endpoint: Callable[..., Any]) -> Bind:
    """``POST /runs``: ``(body: CreateRun, response, svc, who, idempotency_key)``."""
    async def bind(request: Request, response: Response) -> Any:
        value = await json_body(request)
        svc = await get_services(request)
        who = await caller(svc, request)
        return await endpoint(body=body_model(CreateRun, value), response=response, svc=svc,
                              who=who, idempotency_key=request.headers.get("idempotency-key"))
    return bind


def bind_run_events(endpoint: Callable[..., Any]) -> Bind:
    """``GET /runs/{run_id}/events``: ``(run_id, request, svc, after, token, last_event_id)``
    (the endpoint authenticates, a stream token included)."""
    async def bind(request: Request, response: Response) -> Any:
        query = request.query_params
        return await endpoint(run_id=request.path_params["run_id"], request=request,
                              svc=await get_services(request), after=query.get("after"),
                              token=query.get("token"),
                              last_event_id=request.headers.get("last-event-id"))
    return bind
