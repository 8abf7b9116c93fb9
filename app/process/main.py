"""The FastAPI application: routes, error handlers, body guard, CORS and the lifespan.

``create_app(settings, backend=..., resolve_provider=...)`` builds an app (tests inject a backend
and a provider resolver); ``app_factory`` is what uvicorn loads
(``uvicorn --factory app.process.main:app_factory``). The lifespan owns the shared
``httpx.AsyncClient``, the backend, the provider catalog, the tool registry set-up and (unless
``worker=False``) the embedded worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi_offline import FastAPIOffline
from starlette.types import Scope

from app.api.body_guard import BodyGuard
from app.api.errors import CODE_HEADER, FIELD_HEADER, api_error_response, install_error_handlers
from app.api.methods import HeadAsGet
from app.api.openapi import install_contract
from app.api.routes import (
    agents,
    approvals,
    client_tokens,
    events,
    health,
    playground,
    queue,
    runs,
    threads,
    tools,
    usage,
    webhooks,
)
from app.api.routes.front import front_routes
from app.api.stream_limits import too_many_streams
from app.api.trace_context import TraceParent
from app.config import Settings, load_settings
from app.delivery.server_send import StashServerSend
from app.delivery.stream_holds import StreamHolds
from app.dialects.ag_ui import routes as ag_ui
from app.dialects.ai_sdk import routes as ai_sdk
from app.dialects.mcp.routes import McpEndpoint
from app.dialects.mcp.routes import route as mcp_route
from app.engine.loop_config import ResolveProvider
from app.process.services import open_services
from app.process.setup import check_tool_modules
from app.store.contract import Backend
from app.telemetry.logs import RunLogContext, setup_logging

API_DESCRIPTION = "Runs LLM tool-calling loops and streams them over server-sent events."
EXPOSED_HEADERS = ["Location", "Retry-After", "WWW-Authenticate", "Allow", CODE_HEADER,
                   FIELD_HEADER]
"""Response headers a cross-origin page may read (beyond the CORS-safelisted ones): the new
run's ``Location``, ``Retry-After`` of a 503, the 401 challenge, a 405's ``Allow``, the code
and field of a plain-text error."""
TEXT_ERROR_PATHS = ("/ai-sdk/",)
"""Doors whose toolkit shows an error's body verbatim: their errors are plain text
(``app.api.errors``)."""


def create_app(settings: Settings | None = None, *, backend: Backend | None = None,
               resolve_provider: ResolveProvider | None = None,
               worker: bool = True) -> FastAPI:
    """The app; nothing is started until its lifespan runs."""
    cfg = settings or load_settings()
    mcp = McpEndpoint()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(cfg, backend=backend, resolve_provider=resolve_provider,
                                 worker=worker) as services, mcp.running():
            app.state.services = services
            yield

    # /docs (Swagger UI) and /redoc from assets shipped in the package, never from a CDN
    app = FastAPIOffline(title="agentloop", version="1", description=API_DESCRIPTION,
                         lifespan=lifespan, telemetry=_fastapi_telemetry(cfg))
    install_error_handlers(app, TEXT_ERROR_PATHS)
    if cfg.max_streams_per_user:  # every door's streams, counted per end user
        app.state.stream_holds = StreamHolds(
            cfg.max_streams_per_user,
            lambda scope, limit: api_error_response(too_many_streams(limit), scope))
    install_contract(app)
    routers = [module.router for module in (runs, events, queue, approvals, threads, agents,
                                            client_tokens, tools, usage, webhooks, health,
                                            ai_sdk, ag_ui)]
    for router in routers:
        app.include_router(router)
    app.router.routes.append(mcp_route(mcp))
    app.router.routes[0:0] = front_routes(routers)  # the lean routes, before FastAPI's walk
    if cfg.playground:
        app.include_router(playground.router)
    app.add_middleware(HeadAsGet, routes=app.routes)
    app.add_middleware(BodyGuard, limit=cfg.max_body_bytes, text_paths=TEXT_ERROR_PATHS)
    app.add_middleware(RunLogContext, tenant_of=_tenant_of)
    if cfg.otel:  # the caller's traceparent becomes its runs' parent span
        app.add_middleware(TraceParent)
    _add_cors(app, cfg.cors_origin_list())
    app.add_middleware(StashServerSend)  # outermost of ours: app.delivery.server_send
    return app


def _fastapi_telemetry(cfg: Settings) -> dict[str, bool] | None:
    """FastAPI's own OpenTelemetry (HTTP spans, metrics, logs) as ``AGENTLOOP_OTEL`` says:
    its defaults when on; off when off. Left on, it asked the global tracer, meter and logger
    providers (and the environment) on every request whether any was configured: ~4 % of
    ``POST /runs`` in the app (py-spy), for telemetry nobody turned on."""
    return None if cfg.otel else {"tracing": False, "metrics": False, "logs": False}


def _add_cors(app: FastAPI, origins: list[str]) -> None:
    """CORS for ``AGENTLOOP_CORS_ORIGINS`` (off when empty). The API authenticates with a
    bearer header or a ``?token=``, never a cookie, so ``*`` serves every page; a list of
    origins also admits credentialed requests (``withCredentials``), which ``*`` cannot."""
    if origins:
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["*"],
                           allow_headers=["*"], expose_headers=EXPOSED_HEADERS,
                           allow_credentials="*" not in origins)


def _tenant_of(scope: Scope, run_id: str) -> str | None:
    """The tenant a request's credentials name, for its log lines (None if they do not)."""
    services = getattr(scope["app"].state, "services", None)
    if services is None:
        return None
    try:
        return services.auth.tenant_of(Request(scope), stream_run_id=run_id)  # type: ignore[no-any-return]
    except Exception:  # bad credentials: the route answers 401; the log just lacks a tenant
        return None


def app_factory() -> FastAPI:
    """The app from the environment (for ``uvicorn --factory``)."""
    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    check_tool_modules(settings)  # one line and exit 1, not a traceback from the lifespan
    return create_app(settings)
