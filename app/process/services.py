"""The shared resources of one process: HTTP client, backend, provider catalog, tools, worker.

``open_services`` is an async context manager used by the API's lifespan and by ``agentloop
worker``: it builds everything from ``Settings`` (or takes an injected backend and provider
resolver, for tests), and on exit stops the worker (which checkpoints and releases its running
runs) before closing the backend and the client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.api.auth import Authenticator
from app.api.run_requests import ResolveProvider
from app.config import Settings, provider_env
from app.engine.task_guard import install_task_guard
from app.store.contract import Backend, BackendError
from app.telemetry import metrics
from providers._routing import provider_client as routed_client
from providers.catalog import Catalog, Profile, ProviderSettings, builtin_profiles, default_model
from tool_registry import Registry, ToolModuleError, default_registry, import_tool_modules

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Services:
    """Everything a request handler or the worker needs."""

    settings: Settings
    backend: Backend
    auth: Authenticator
    resolve_provider: ResolveProvider
    default_model: str
    env: dict[str, str]
    registry: Registry = field(default_factory=lambda: default_registry)
    client: httpx.AsyncClient | None = None
    worker: asyncio.Task[None] | None = None
    janitor: asyncio.Task[None] | None = None


def provider_settings(settings: Settings) -> ProviderSettings:
    """The catalog's settings from ours (profiles merged over the built-in ones)."""
    profiles = builtin_profiles()
    for name, spec in settings.profile_map().items():
        profiles[name] = Profile(**spec)
    return ProviderSettings(retry_attempts=settings.provider_retries,
                            connect_timeout=settings.provider_connect_timeout,
                            read_timeout=settings.provider_read_timeout, profiles=profiles)


def make_store(settings: Settings) -> Backend:
    """The backend the settings name (memory when ``redis_url`` is unset)."""
    from app.store import make_backend

    return make_backend(settings.redis_url, lease=settings.lease_seconds,
                        run_ttl=settings.run_ttl, client_name=settings.worker_name,
                        thread_ttl=settings.thread_ttl, cluster=settings.redis_cluster)


def model_resolver(settings: Settings, env: dict[str, str],
                   client: httpx.AsyncClient) -> ResolveProvider:
    """How ``"provider:model"`` becomes a provider, for the service and a plain ``runtime.exec``
    alike: ``AGENTLOOP_PROVIDER_FACTORY`` when set, else the catalog with the built-in providers
    and the ``AGENTLOOP_OPENAI_PROFILES`` (``.env`` included) over ``client``."""
    if settings.provider_factory:
        from app.worker.worker import load_factory

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


def check_tool_modules(settings: Settings) -> None:
    """Import the operator's tool modules before anything starts; exit with one line on
    stderr when one cannot be imported (the service does not start without its tools)."""
    try:
        import_tool_modules(settings.tool_module_list())
    except ToolModuleError as exc:
        raise SystemExit(f"agentloop: {exc}") from None


def worker_name() -> str:
    """A name unique to this process."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def worker_options(cfg: Settings, env: dict[str, str]) -> dict[str, Any]:
    """``Worker`` settings from the configuration (embedded worker and ``agentloop worker``)."""
    return {"name": cfg.worker_name or worker_name(), "concurrency": cfg.worker_concurrency,
            "lease": cfg.lease_seconds, "heartbeat": cfg.heartbeat_seconds,
            "disabled_tools": cfg.disabled_tool_list(), "env": env,
            "tool_timeout": cfg.tool_timeout, "max_result_chars": cfg.max_result_chars,
            "flush_interval": cfg.event_flush_ms / 1000, "run_timeout": cfg.run_timeout,
            "default_max_tokens": cfg.default_max_tokens, "max_attempts": cfg.max_attempts}


async def _start_worker(svc: Services, stop: asyncio.Event) -> asyncio.Task[None]:
    from app.worker.worker import run_worker

    cfg = svc.settings
    coro = run_worker(backend=svc.backend, resolve_provider=svc.resolve_provider, stop=stop,
                      registry=svc.registry, **worker_options(cfg, svc.env))
    task = asyncio.create_task(coro, name="agentloop-worker")
    task.add_done_callback(_worker_ended)
    return task


def _start_janitor(svc: Services) -> asyncio.Task[None] | None:
    """The workspace sweeper (``app.worker.janitor``) of a process that runs tools."""
    from app.worker.janitor import run_janitor
    from tool_registry.builtin.settings import current

    every = svc.settings.workspace_sweep_seconds
    if not every:
        return None
    tools = current()
    return asyncio.create_task(run_janitor(svc.backend, tools.workspace_root, every=every,
                                           keep=tools.shared_workspace),
                               name="agentloop-janitor")


def _worker_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the embedded worker crashed", exc_info=task.exception())


def _log_startup(svc: Services, sandbox: str, worker: bool) -> None:
    demo = " (the offline demo: no provider key is set)" if svc.default_model.startswith(
        "demo:") else ""
    log.info("agentloop starting: backend=%s default_model=%s%s sandbox=%s worker=%s",
             svc.backend.name, svc.default_model, demo, sandbox, "on" if worker else "off")
    if svc.auth.enabled:
        log.info("auth on: API keys required (stream tokens for event streams)")
    else:
        log.warning("AUTH IS OFF: no AGENTLOOP_API_KEYS configured; every caller is tenant "
                    "'default'. Do not expose this server.")


def provider_client(settings: Settings, env: dict[str, str]) -> httpx.AsyncClient:
    """The one client every provider shares, routed per URL (``providers._routing``): the lean
    HTTP/1.1 transport wherever no proxy applies (https too unless ``provider_http2``), httpx's
    proxy transports where one does."""
    return routed_client(env, http2=settings.provider_http2,
                         timeout=provider_settings(settings).timeout(),
                         max_connections=settings.provider_max_connections)


@asynccontextmanager
async def open_services(settings: Settings, *, backend: Backend | None = None,
                        resolve_provider: ResolveProvider | None = None,
                        worker: bool = True) -> AsyncIterator[Services]:
    """Build, start and finally close the process's shared resources."""
    env = provider_env()
    async with provider_client(settings, env) as client:
        store = backend if backend is not None else make_store(settings)
        auth = Authenticator(settings.api_key_map(), secret=settings.stream_token_secret,
                             token_ttl=settings.stream_token_ttl)
        svc = Services(settings=settings, backend=store, auth=auth,
                       resolve_provider=resolve_provider or model_resolver(settings, env, client),
                       default_model=served_default_model(settings, env), env=env,
                       client=client)
        load_tools(settings)
        install_task_guard(asyncio.get_running_loop())
        sandbox = await probe_sandbox()
        metrics.configure_labels(registry=svc.registry,
                                 providers=provider_settings(settings).profiles)
        await _start_store(store)
        stop = asyncio.Event()
        try:
            if worker:
                svc.worker = await _start_worker(svc, stop)
                svc.janitor = _start_janitor(svc)
            _log_startup(svc, sandbox, worker)
            yield svc
        finally:
            stop.set()
            if svc.janitor is not None:
                svc.janitor.cancel()
                await asyncio.gather(svc.janitor, return_exceptions=True)
            if svc.worker is not None:
                await _stop_worker(svc.worker, svc.settings.lease_seconds)
            await store.close()


async def _start_store(store: Backend) -> None:
    """Connect; a store that is down at start-up is not fatal: /readyz says 503, requests get
    503 + Retry-After, and the worker keeps retrying until it is back."""
    try:
        await store.start()
    except BackendError as exc:
        log.warning("backend %s unreachable at start-up (%s); serving 503 until it is back",
                    store.name, exc)


async def _stop_worker(task: asyncio.Task[None], grace: float) -> None:
    """Wait for the worker to release its runs; cancel it if it takes longer than ``grace``."""
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=grace)
    except TimeoutError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    except Exception:
        log.exception("worker failed")
