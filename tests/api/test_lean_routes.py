"""``POST /runs`` and ``GET /runs/{id}/events`` are bound without FastAPI's generic request
handling (``app/api/routes/lean.py``) and answered before FastAPI's router walks its routes
(``app/api/routes/front.py``): every answer must be the one FastAPI's own handler gives for
the same request. Each request goes to one server twice: through the front route's lean
handler, then with the front routes taken out and the route switched back to FastAPI's
handler; status, body and the headers a client reads must agree (ids, times and tokens
aside)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi import routing
from fastapi.routing import APIRoute

from app.api.routes import events, runs
from app.api.routes.front import FrontRoute
from app.api.routes.lean import LeanRoute
from app.api.routes.strict_json import StrictJsonRoute
from tests.api.conftest import Api, serve

KEY = "sk-lean-test"
KEYS = f"{KEY}:lean"
VOLATILE = {"id", "created_at", "stream_token", "events_url", "started_at"}


def _lean_routes() -> list[APIRoute]:
    found = [r for r in [*runs.router.routes, *events.router.routes]
             if isinstance(r, LeanRoute) and r.path in ("/runs", "/runs/{run_id}/events")
             and r.methods & {"POST", "GET"}]
    assert {(r.path, tuple(sorted(r.methods))) for r in found} >= {
        ("/runs", ("POST",)), ("/runs/{run_id}/events", ("GET",))}
    return found


FASTAPI_CALLS: list[str] = []
CURRENT_APP: list[Any] = []


def _contexts(app: Any) -> list[Any]:
    """FastAPI 0.165's per-inclusion route contexts of the two routes: each holds the handler
    that answers (built from ``route.get_route_handler()`` when the router was included)."""
    lean = _lean_routes()
    found = []
    for included in app.router.routes:
        candidates = getattr(included, "effective_candidates", None)
        if candidates is None:
            continue
        found += [c for c in candidates() if getattr(c, "original_route", None) in lean]
    assert len(found) >= 2, found
    return found


@contextmanager
def fastapi_handlers(*, reached: bool = True) -> Iterator[None]:
    """The two routes answered by FastAPI's routing and its own request handler meanwhile:
    the front routes out of the app's routes, each call of FastAPI's handler counted (so a
    swap that did not take shows)."""
    app = CURRENT_APP[-1]
    saved = [(c, c.app) for c in _contexts(app)]
    routes = app.router.routes
    fronts = [r for r in routes if isinstance(r, FrontRoute)]
    assert len(fronts) == 2, routes

    def counted(route: APIRoute) -> Any:
        token = routing._effective_route_context_var.set(context)
        try:
            handler = StrictJsonRoute.get_route_handler(route)
        finally:
            routing._effective_route_context_var.reset(token)

        async def call(request: Any) -> Any:
            FASTAPI_CALLS.append(route.path)
            return await handler(request)
        return call

    before = len(FASTAPI_CALLS)
    try:
        for context, _ in saved:
            context.app = routing.wrap_app_with_body_limit(
                routing.request_response(counted(context.original_route)), context.max_body_size)
        routes[:] = [r for r in routes if r not in fronts]
        yield
    finally:
        for context, handler in saved:
            context.app = handler
        routes[0:0] = fronts
    if reached:  # (a request the middleware refuses never gets to a route)
        assert len(FASTAPI_CALLS) > before, "FastAPI's handler was never called"


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with serve(worker=False, api_keys=KEYS) as running:
        CURRENT_APP.append(running.server.server.config.app)
        try:
            yield running
        finally:
            CURRENT_APP.pop()


def _shape(resp: httpx.Response) -> dict[str, Any]:
    body: Any = resp.content
    if resp.headers.get("content-type", "").startswith("application/json") and resp.content:
        body = resp.json()
        if isinstance(body, dict):
            body = {k: ("<varies>" if k in VOLATILE else v) for k, v in body.items()}
    location = resp.headers.get("location")
    return {"status": resp.status_code, "body": body,
            "content-type": resp.headers.get("content-type"),
            "location": location and location.rsplit("/", 1)[0],
            "code": resp.headers.get("x-agentloop-error-code"),
            "field": resp.headers.get("x-agentloop-error-field"),
            "www-authenticate": resp.headers.get("www-authenticate")}


AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {"content-type": "application/json"}
POSTS: list[tuple[str, dict[str, str], bytes]] = [
    ("a run", AUTH | JSON, b'{"input": "hi", "model": "openai:gpt-4.1-mini"}'),
    ("no credentials", JSON, b'{"input": "hi"}'),
    ("a wrong key", {"Authorization": "Bearer nope"} | JSON, b'{"input": "hi"}'),
    ("malformed JSON without credentials", JSON, b'{"input": '),
    ("malformed JSON", AUTH | JSON, b'{"input": "hi",}'),
    ("no body", AUTH | JSON, b""),
    ("no body, no content type", AUTH, b""),
    ("a list", AUTH | JSON, b"[1, 2]"),
    ("a string", AUTH | JSON, b'"hi"'),
    ("null", AUTH | JSON, b"null"),
    ("a wrong type", AUTH | JSON, b'{"input": 5}'),
    ("a wrong nested type", AUTH | JSON, b'{"input": "hi", "metadata": {"a": [1]}}'),
    ("an unknown field", AUTH | JSON, b'{"input": "hi", "nope": 1}'),
    ("too deep", AUTH | JSON, b'{"input": "hi", "metadata": ' + b'[' * 80 + b']' * 80 + b"}"),
    ("NaN", AUTH | JSON, b'{"input": "hi", "temperature": NaN}'),
    ("a bad model", AUTH | JSON, b'{"input": "hi", "model": "nope"}'),
    ("a bad tool_choice", AUTH | JSON, b'{"input": "hi", "tool_choice": "sometimes"}'),
    ("a +json type", AUTH | {"content-type": "application/vnd.x+json; charset=utf-8"},
     b'{"input": "hi"}'),
    ("text", AUTH | {"content-type": "text/plain"}, b"hi"),
]


@pytest.mark.parametrize(("label", "headers", "body"), POSTS, ids=[p[0] for p in POSTS])
async def test_post_runs_answers_as_fastapi_does(api: Api, label: str, headers: dict[str, str],
                                                 body: bytes) -> None:
    client = httpx.AsyncClient(base_url=api.url, timeout=10)
    async with client:
        lean = await client.post("/runs", content=body, headers=headers)
        with fastapi_handlers(reached=label != "text"):
            plain = await client.post("/runs", content=body, headers=headers)
    assert _shape(lean) == _shape(plain), (label, lean.text, plain.text)


async def test_an_idempotent_repeat_answers_as_fastapi_does(api: Api) -> None:
    body = json.dumps({"input": "hi"}).encode()
    headers = AUTH | JSON | {"Idempotency-Key": "k-1"}
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as client:
        first = await client.post("/runs", content=body, headers=headers)
        lean = await client.post("/runs", content=body, headers=headers)
        with fastapi_handlers():
            plain = await client.post("/runs", content=body, headers=headers)
        conflict_lean = await client.post("/runs", content=b'{"input": "other"}', headers=headers)
        with fastapi_handlers():
            conflict_plain = await client.post("/runs", content=b'{"input": "other"}',
                                               headers=headers)
    assert first.status_code == 201 and lean.status_code == plain.status_code == 200
    assert lean.json()["id"] == plain.json()["id"] == first.json()["id"]
    assert lean.headers["location"] == plain.headers["location"]
    assert _shape(conflict_lean) == _shape(conflict_plain)


async def test_get_events_answers_as_fastapi_does(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as client:
        made = await client.post("/runs", json={"input": "hi"}, headers=AUTH)
        run_id, token = made.json()["id"], made.json()["stream_token"]
        cases = [("unknown run", "/runs/run_0123456789abcdef0123456789abcdef/events", AUTH),
                 ("a malformed id", "/runs/nope/events", AUTH),
                 ("no credentials", f"/runs/{run_id}/events", {}),
                 ("a bad after", f"/runs/{run_id}/events?after=x", AUTH),
                 ("a bad Last-Event-ID", f"/runs/{run_id}/events",
                  AUTH | {"Last-Event-ID": "-1"}),
                 ("a huge after", f"/runs/{run_id}/events?after=99999999999999999999", AUTH),
                 ("a wrong token", f"/runs/{run_id}/events?token=x", {})]
        for label, path, headers in cases:
            lean = await client.get(path, headers=headers)
            with fastapi_handlers():
                plain = await client.get(path, headers=headers)
            assert _shape(lean) == _shape(plain), (label, lean.text, plain.text)
        for via in ("lean", "fastapi"):  # a live stream opens with the run's first event
            headers = {"accept": "text/event-stream"}
            if via == "fastapi":
                ctx = fastapi_handlers()
                ctx.__enter__()
            try:
                async with client.stream("GET", f"/runs/{run_id}/events?token={token}",
                                         headers=headers) as resp:
                    assert resp.status_code == 200, via
                    assert resp.headers["content-type"].startswith("text/event-stream")
                    first = b""
                    async for chunk in resp.aiter_bytes():
                        first += chunk
                        if b"\n\n" in first:
                            break
                    assert b"event: run_created" in first, (via, first)
            finally:
                if via == "fastapi":
                    ctx.__exit__(None, None, None)


def test_the_routes_keep_their_openapi(api: Api) -> None:
    spec = httpx.get(api.url + "/openapi.json", timeout=10).json()
    post = spec["paths"]["/runs"]["post"]
    assert post["operationId"] == "createRun"
    assert "requestBody" in post and {"201", "422", "401"} <= set(post["responses"])
    assert any(p["name"] == "Idempotency-Key" or p["name"].lower() == "idempotency-key"
               for p in post.get("parameters", []))
    get = spec["paths"]["/runs/{run_id}/events"]["get"]
    assert get["operationId"] == "streamRunEvents"
    assert {p["name"] for p in get["parameters"]} >= {"run_id", "after", "token"}


async def test_the_front_routes_take_exactly_their_requests(api: Api,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``POST /runs`` and ``GET /runs/{id}/events`` are answered by the front routes; another
    method or path at the same place goes on to FastAPI's routing and gets what it got
    before (a 405 listing every method of the path, the list of runs)."""
    taken: list[tuple[str, str]] = []
    fronts = [r for r in CURRENT_APP[-1].router.routes if isinstance(r, FrontRoute)]
    assert {(f.path, tuple(sorted(f.methods))) for f in fronts} == {
        ("/runs", ("POST",)), ("/runs/{run_id}/events", ("GET",))}
    for front in fronts:
        async def counted(scope: Any, receive: Any, send: Any, inner: Any = front.app) -> None:
            taken.append((scope["method"], scope["path"]))
            await inner(scope, receive, send)
        monkeypatch.setattr(front, "app", counted)
    unknown = "/runs/run_0123456789abcdef0123456789abcdef/events"
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as client:
        made = await client.post("/runs", json={"input": "hi"}, headers=AUTH)
        missing = await client.get(unknown, headers=AUTH)
        assert (made.status_code, missing.status_code) == (201, 404)
        assert taken == [("POST", "/runs"), ("GET", unknown)]
        listed = await client.get("/runs", headers=AUTH)
        put = await client.put("/runs", json={"input": "hi"}, headers=AUTH)
        delete = await client.delete(unknown, headers=AUTH)
        slash = await client.post("/runs/", json={"input": "hi"}, headers=AUTH)
    assert taken == [("POST", "/runs"), ("GET", unknown)], taken
    assert listed.status_code == 200
    assert made.json()["id"] in {r["id"] for r in listed.json()["runs"]}
    assert put.status_code == delete.status_code == 405
    assert put.headers["allow"] == "GET, HEAD, POST" and delete.headers["allow"] == "GET, HEAD"
    assert slash.status_code in (307, 404), slash.status_code
    # URLs by route name still come from the declared routes (an embedding app's url_for)
    app = CURRENT_APP[-1]
    assert app.url_path_for("create_run") == "/runs"
    assert app.url_path_for("run_events", run_id="run_x") == "/runs/run_x/events"
