"""Set-up shared by the service and a plain ``runtime.exec``: how model names become providers
(the catalog, ``AGENTLOOP_OPENAI_PROFILES``, ``AGENTLOOP_PROVIDER_FACTORY``), the default model,
the tools (built-ins, ``AGENTLOOP_TOOL_MODULES``, the sandbox probe) and the store."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import httpx

from app.api.agents import AgentSpec, load_agents_file, load_file_mcp_servers
from app.api.auth.idp import IdpSettings
from app.config import Settings
from app.engine.loop_config import ResolveProvider
from app.store.contract import Backend
from app.telemetry.trace_seam import Tracing
from providers._routing import provider_client as routed_client
from providers.catalog import Catalog, Profile, ProviderSettings, builtin_profiles, default_model
from tool_registry import ToolModuleError, import_tool_modules
from tool_registry.mcp import McpConfigError, McpServerConfig, parse_servers

log = logging.getLogger(__name__)


def provider_settings(settings: Settings) -> ProviderSettings:
    """The catalog's settings from ours (profiles merged over the built-in ones)."""
    profiles = builtin_profiles()
    for name, spec in settings.profile_map().items():
        profiles[name] = Profile(**spec)
    return ProviderSettings(retry_attempts=settings.provider_retries,
                            connect_timeout=settings.provider_connect_timeout,
                            read_timeout=settings.provider_read_timeout, profiles=profiles,
                            attachment_max_bytes=settings.attachment_max_bytes,
                            fetch_timeout=settings.attachment_fetch_timeout,
                            fetch_allow_private=settings.fetch_allow_private)


def make_store(settings: Settings) -> Backend:
    """The backend the settings name (memory when ``redis_url`` is unset)."""
    from app.store import make_backend  # the Redis client is imported only when asked for

    return make_backend(settings.redis_url, lease=settings.lease_seconds,
                        run_ttl=settings.run_ttl, client_name=settings.worker_name,
                        thread_ttl=settings.thread_ttl, cluster=settings.redis_cluster,
                        max_connections=settings.redis_max_connections,
                        write_window=settings.event_flush_ms / 1000)


def model_resolver(settings: Settings, env: dict[str, str],
                   client: httpx.AsyncClient) -> ResolveProvider:
    """How ``"provider:model"`` becomes a provider, for the service and a plain ``runtime.exec``
    alike: ``AGENTLOOP_PROVIDER_FACTORY`` when set, else the catalog with the built-in providers
    and the ``AGENTLOOP_OPENAI_PROFILES`` (``.env`` included) over ``client``."""
    if settings.provider_factory:
        return load_factory(settings.provider_factory)
    return Catalog(client, env, provider_settings(settings)).resolve


def served_default_model(settings: Settings, env: dict[str, str]) -> str:
    """The model used when a run (or a ``runtime.exec``) names none."""
    return settings.default_model or default_model(env)


_tools_loaded = False


def load_tools(settings: Settings) -> None:
    """Register built-in and operator tools and configure the built-ins.

    Raises ``ToolModuleError`` (one readable line) for a tool module that cannot be imported.
    """
    global _tools_loaded
    import tool_registry.builtin as builtin
    from tool_registry.builtin.settings import BuiltinSettings

    import_tool_modules(settings.tool_module_list())
    extra: dict[str, Any] = {}
    if settings.workspace_root is not None:
        extra["workspace_root"] = Path(settings.workspace_root)
    builtin.configure(BuiltinSettings(
        shared_workspace=settings.workspace, unsafe_code_tools=settings.unsafe_code_tools,
        workspace_max_bytes=settings.workspace_max_bytes,
        code_timeout_max=settings.code_timeout_max,
        fetch_allow_private=settings.fetch_allow_private, **extra))
    _tools_loaded = True


async def probe_sandbox() -> str:
    """Run one real sandboxed program on this loop (``builtin.probe``); log what it saw and
    return the mode now in force."""
    from tool_registry.builtin import sandbox
    from tool_registry.builtin.probe import probe_code_tools

    probe = await probe_code_tools()
    outcome = "ok" if probe.ok else "FAILED"
    level = logging.INFO if probe.ok or probe.mode == "disabled" else logging.ERROR
    log.log(level, "sandbox probe %s (mode %s, %.2f s): %s%s", outcome, probe.mode,
            probe.seconds, probe.detail,
            "" if probe.ok else "; run_python/run_shell are off every menu")
    return str(sandbox.sandbox_mode())


def ensure_tools(settings: Settings) -> None:
    """``load_tools`` once per process, for a ``runtime.exec`` outside the service (whose
    tools are on by default, as in the service); built-in settings a script ``configure``-d
    itself are kept."""
    global _tools_loaded
    if _tools_loaded:
        return
    from tool_registry.builtin import settings as builtin_settings

    if builtin_settings.configured():
        import_tool_modules(settings.tool_module_list())
        _tools_loaded = True
    else:
        load_tools(settings)


def agents_of(settings: Settings) -> dict[str, AgentSpec]:
    """The agents of ``AGENTLOOP_AGENTS_FILE`` (none when unset); exit with one line on
    stderr for a file that cannot be read as agents."""
    if settings.agents_file is None:
        return {}
    try:
        return load_agents_file(settings.agents_file)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"agentloop: AGENTLOOP_AGENTS_FILE: {exc}") from None


def idp_settings(settings: Settings) -> IdpSettings:
    """The identity provider's settings (``AGENTLOOP_JWT_*``)."""
    return IdpSettings(jwks_url=settings.jwt_jwks_url, secret=settings.jwt_secret,
                       issuer=settings.jwt_issuer, audience=settings.jwt_audience,
                       tenant=settings.jwt_tenant, tenant_claim=settings.jwt_tenant_claim,
                       agents_claim=settings.jwt_agents_claim,
                       refetch_after=settings.jwt_jwks_refetch_seconds)


def check_tool_modules(settings: Settings) -> None:
    """Import the operator's tool modules before anything starts; exit with one line on
    stderr when one cannot be imported (the service does not start without its tools)."""
    try:
        import_tool_modules(settings.tool_module_list())
    except ToolModuleError as exc:
        raise SystemExit(f"agentloop: {exc}") from None
    agents_of(settings)
    mcp_configs(settings)


def mcp_configs(settings: Settings) -> dict[str, McpServerConfig]:
    """The servers of ``AGENTLOOP_MCP_SERVERS`` and of the agents file's ``mcp_servers``;
    exit with one line naming the server and field for a declaration that cannot be used
    (or a name both declare)."""
    where = "AGENTLOOP_MCP_SERVERS"
    try:
        servers = parse_servers(settings.mcp_server_map())
        if settings.agents_file is not None:
            where = str(settings.agents_file)
            from_file = parse_servers(load_file_mcp_servers(settings.agents_file))
            for name in from_file.keys() & servers.keys():
                raise McpConfigError(f"{name}: declared in AGENTLOOP_MCP_SERVERS too")
            servers.update(from_file)
    except (McpConfigError, ValueError, OSError) as exc:
        raise SystemExit(f"agentloop: {where}: mcp_servers: {exc}") from None
    return servers

def worker_options(cfg: Settings, env: dict[str, str]) -> dict[str, Any]:
    """``Worker`` settings from the configuration (embedded worker and ``agentloop worker``)."""
    from app.worker.worker import worker_name

    return {"name": cfg.worker_name or worker_name(), "concurrency": cfg.worker_concurrency,
            "lease": cfg.lease_seconds, "heartbeat": cfg.heartbeat_seconds,
            "disabled_tools": cfg.disabled_tool_list(), "env": env,
            "tool_timeout": cfg.tool_timeout, "max_result_chars": cfg.max_result_chars,
            "flush_interval": cfg.event_flush_ms / 1000, "run_timeout": cfg.run_timeout,
            "default_max_tokens": cfg.default_max_tokens, "max_attempts": cfg.max_attempts,
            "fetch_allow_private": cfg.fetch_allow_private,
            "tracing": run_tracing(cfg)}


def run_tracing(cfg: Settings) -> Tracing | None:
    """Traces of runs (``app.telemetry.traces``, imported only when ``AGENTLOOP_OTEL`` is on)."""
    if not cfg.otel:
        return None
    from app.telemetry.traces import RunTracing

    return RunTracing(content=cfg.otel_content)

def provider_client(settings: Settings, env: dict[str, str]) -> httpx.AsyncClient:
    """The one client every provider shares, routed per URL (``providers._routing``): the lean
    HTTP/1.1 transport wherever no proxy applies (https too unless ``provider_http2``), httpx's
    proxy transports where one does."""
    return routed_client(env, http2=settings.provider_http2,
                         timeout=provider_settings(settings).timeout(),
                         max_connections=settings.provider_max_connections)


def load_factory(spec: str) -> ResolveProvider:
    """``AGENTLOOP_PROVIDER_FACTORY``: ``module:callable`` → the ``resolve_provider`` the
    callable returns."""
    module, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    resolve: ResolveProvider = factory()
    return resolve
