"""What a request handler needs of its process (built by ``app.process.services``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from app.api.agents import AgentCatalog
from app.api.auth import Authenticator
from app.config import Settings
from app.engine.loop_config import ResolveProvider
from app.store.contract import Backend
from tool_registry import Registry, default_registry
from tool_registry.mcp import McpServers


@dataclass(slots=True)
class Services:
    """Everything a request handler or the worker needs."""

    settings: Settings
    backend: Backend
    auth: Authenticator
    resolve_provider: ResolveProvider
    default_model: str
    env: dict[str, str]
    agents: AgentCatalog
    registry: Registry = field(default_factory=lambda: default_registry)
    client: httpx.AsyncClient | None = None
    worker: asyncio.Task[None] | None = None
    janitor: asyncio.Task[None] | None = None
    webhooks: asyncio.Task[None] | None = None
    """The webhook sender (``app.worker.webhooks``) of a worker process."""
    mcp: McpServers | None = None
    """The operator's MCP servers (``AGENTLOOP_MCP_SERVERS``), connected for the process."""
