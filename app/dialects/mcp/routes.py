"""``/mcp``: the endpoint (Streamable HTTP, the SDK's session manager, stateless: every POST
stands alone, so any API process behind a balancer answers it), behind the API's own auth
(an API key or an end user's token: 401 before the protocol is spoken)::

    GET, DELETE /mcp ─ 405 (stateless: no stream of the server's own, no session)
    POST /mcp ─ caller() ─ 401 │ principal in the request's state
              ─ body as every door reads it (``strict_loads``) ─ 400 JSON-RPC error │
              ─▶ session manager ─▶ tools/list ─ offered()
                                    tools/call ─ call(): submit, follow, result

The SDK parses the body with the standard library's ``json``, which takes what the other
doors refuse (nesting past the recursion limit: a 500; lone surrogates, ``NaN``, integers
wider than 64 bits: a run that fails when stored, a reply that cannot be encoded), so the
body is read here first, as ``app.api.routes.strict_json`` reads every other door's, and
handed on unchanged.

The SDK's handlers find the request (and so the services and the caller) in their request
context.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.types import INVALID_REQUEST, PARSE_ERROR
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from app.api.auth import Principal
from app.api.errors import ApiError, error_response
from app.api.routes.deps import caller
from app.api.routes.strict_json import strict_loads
from app.api.services import Services
from app.delivery.stream_holds import serve_held
from app.dialects.mcp import tools

PATH = "/mcp"
PRINCIPAL = "agentloop_principal"


def _context(server: Server[Any, Any]) -> tuple[Services, Principal, Any]:
    ctx = server.request_context
    request = ctx.request
    assert isinstance(request, Request)
    return request.app.state.services, request.state.agentloop_principal, ctx


def build_server() -> Server[Any, Any]:
    """The SDK's low-level server with agentloop's tools."""
    server: Server[Any, Any] = Server("agentloop")

    @server.list_tools()  # type: ignore[no-untyped-call, untyped-decorator]
    async def list_tools() -> list[types.Tool]:
        svc, who, _ = _context(server)
        return await tools.offered(svc, who)

    @server.call_tool()  # type: ignore[untyped-decorator]
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        svc, who, ctx = _context(server)
        token = ctx.meta.progressToken if ctx.meta is not None else None
        done = 0

        async def notify(message: str) -> None:
            nonlocal done
            done += 1
            if token is not None:
                await ctx.session.send_progress_notification(
                    token, done, None, message, related_request_id=str(ctx.request_id))

        return await tools.call(svc, who, name, arguments, notify)

    return server


class McpEndpoint:
    """The ASGI endpoint of ``/mcp``; ``running()`` (in the app's lifespan) starts the
    session manager it hands requests to."""

    def __init__(self) -> None:
        self.server = build_server()
        self.manager: StreamableHTTPSessionManager | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager, for as long as the app runs (one per lifespan)."""
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True)
        async with self.manager.run():
            yield
        self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            who = await caller(request.app.state.services, request)
        except ApiError as exc:
            response = error_response(exc.status, exc.code, exc.message, exc.field,
                                      exc.extra_headers)
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL] = who
        if request.method != "POST":
            # stateless: no server-initiated messages (GET's stream would stay open and idle
            # for as long as the client keeps it) and no session to end (DELETE); the
            # specification's answer for a server that offers neither is 405
            response = error_response(
                405, "method_not_allowed", f"{request.method} {PATH}: this MCP server is "
                "stateless (no stream of its own messages, no session); POST requests",
                headers={"Allow": "POST"})
            await response(scope, receive, send)
            return
        body = await request.body()  # bounded by the body guard (413)
        refused = _refused(body)
        if refused is not None:
            await refused(scope, receive, send)
            return
        receive = _replay(body, receive)
        assert self.manager is not None, "the app's lifespan runs the session manager"
        manager = self.manager  # a call streams for as long as its run: counted as a stream
        await serve_held(scope, receive, send,
                         lambda: manager.handle_request(scope, receive, send))


def _refused(body: bytes) -> JSONResponse | None:
    """A JSON-RPC error (HTTP 400, in the SDK's own shape for errors without a request id)
    when ``body`` is not JSON every door accepts, else None."""
    try:
        strict_loads(body)
    except ValueError as exc:  # orjson's JSONDecodeError
        code, message = PARSE_ERROR, f"Parse error: {exc}"
    except ApiError as exc:  # nested too deep, the path named
        code, message = INVALID_REQUEST, f"Invalid request: {exc.message}"
    else:
        return None
    return JSONResponse({"jsonrpc": "2.0", "id": "server-error",
                         "error": {"code": code, "message": message}}, status_code=400)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body``, already read, given back first (the SDK reads it again);
    then the connection's own messages (its disconnect cancels the call)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def route(endpoint: McpEndpoint) -> Route:
    """``/mcp`` for every method the protocol uses (POST; GET and DELETE answer 405)."""
    return Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"],
                 include_in_schema=False)
