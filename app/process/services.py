"""The shared resources of one process: HTTP client, backend, provider catalog, tools, worker.

``open_services`` is an async context manager used by the API's lifespan and by ``agentloop
worker``: it builds everything from ``Settings`` (or takes an injected backend and provider
resolver, for tests), and on exit stops the worker (which checkpoints and releases its running
runs) before closing the backend and the client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.api.agents import AgentCatalog
from app.api.auth import Authenticator
from app.api.auth.idp import IdentityProvider
from app.api.errors import ApiError
from app.api.pipeline import check_run_options
from app.api.services import Services
from app.config import Settings, provider_env
from app.engine.loop_config import ResolveProvider
from app.engine.task_guard import install_task_guard
from app.process.setup import (
    agents_of,
    idp_settings,
    load_tools,
    make_store,
    mcp_configs,
    model_resolver,
    probe_sandbox,
    provider_client,
    provider_settings,
    served_default_model,
    worker_options,
)
from app.store.contract import Backend
from app.store.errors import BackendError
from app.telemetry import metrics
from tool_registry import default_registry
from tool_registry.mcp import McpServers

log = logging.getLogger(__name__)


async def _start_worker(svc: Services, stop: asyncio.Event) -> asyncio.Task[None]:
    from app.worker.worker import run_worker

    cfg = svc.settings
    coro = run_worker(backend=svc.backend, resolve_provider=svc.resolve_provider, stop=stop,
                      registry=svc.registry, **worker_options(cfg, svc.env))
    task = asyncio.create_task(coro, name="agentloop-worker")
    task.add_done_callback(_worker_ended)
    return task


def _start_webhooks(svc: Services, stop: asyncio.Event) -> asyncio.Task[None] | None:
    """The webhook sender (``app.worker.webhooks``) of a worker process, when webhooks are on."""
    from app.worker.webhooks import WebhookSettings, deliver_webhooks

    cfg = svc.settings
    if cfg.webhook_secret is None:
        return None
    settings = WebhookSettings(secret=cfg.webhook_secret,
                               allow=tuple(cfg.webhook_allow_list()),
                               first_retry=cfg.webhook_retry_seconds,
                               retry_cap=cfg.webhook_retry_cap, attempts=cfg.webhook_attempts,
                               timeout=cfg.webhook_timeout)
    return asyncio.create_task(deliver_webhooks(svc.backend, settings, stop),
                               name="agentloop-webhooks")


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


@asynccontextmanager
async def open_services(settings: Settings, *, backend: Backend | None = None,
                        resolve_provider: ResolveProvider | None = None,
                        worker: bool = True) -> AsyncIterator[Services]:
    """Build, start and finally close the process's shared resources."""
    env = provider_env()
    mcp = McpServers(mcp_configs(settings), default_registry, env)
    async with provider_client(settings, env) as client, mcp:
        store = backend if backend is not None else make_store(settings)
        auth = Authenticator(settings.api_key_map(), secret=settings.stream_token_secret,
                             token_ttl=settings.stream_token_ttl,
                             idp=IdentityProvider(idp_settings(settings)))
        svc = Services(settings=settings, backend=store, auth=auth,
                       resolve_provider=resolve_provider or model_resolver(settings, env, client),
                       default_model=served_default_model(settings, env), env=env,
                       client=client, agents=AgentCatalog(store, agents_of(settings)),
                       registry=mcp.registry, mcp=mcp)
        load_tools(settings)
        check_file_agents(svc)
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
                svc.webhooks = _start_webhooks(svc, stop)
            _log_startup(svc, sandbox, worker)
            yield svc
        finally:
            stop.set()
            if svc.janitor is not None:
                svc.janitor.cancel()
                await asyncio.gather(svc.janitor, return_exceptions=True)
            if svc.webhooks is not None:  # it ends at ``stop`` once its sends are stored
                await asyncio.gather(svc.webhooks, return_exceptions=True)
            if svc.worker is not None:
                await _stop_worker(svc.worker, svc.settings.lease_seconds)
            await store.close()
            await auth.close()


def check_file_agents(svc: Services) -> None:
    """Each agent of ``AGENTLOOP_AGENTS_FILE`` passes a run's checks (its model, tools,
    approval names...): else the service does not start (one line, the agent and field)."""
    for name, spec in svc.agents.file_agents.items():
        try:
            check_run_options(svc, spec)
        except ApiError as exc:
            raise SystemExit(f"agentloop: {svc.settings.agents_file}: agent {name!r}: "
                             f"{exc.message}") from None


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
