"""The operator's MCP servers as toolsets of a registry: each server is toolset
``mcp:<name>``, its tools registered as ``<name>__<tool>`` and re-registered whenever the
server's list changes (``notifications/tools/list_changed``, a reconnect). A menu holds the
tool objects it was built with, so a run keeps the tools it started with.

A server that cannot be reached at start-up does not stop the service: its toolset stays
empty and a background task keeps trying (``RETRY_EVERY``) until it connects once; from then
on a lost link is connected again by the next call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from mcp import types

from tool_registry.mcp.config import McpServerConfig
from tool_registry.mcp.connection import McpConnection, McpUnavailable
from tool_registry.mcp.tools import McpTool, toolset_name
from tool_registry.policy import SEARCH_TOOL
from tool_registry.registry import Registry

log = logging.getLogger(__name__)

RETRY_EVERY = 5.0
"""Seconds between connect attempts to a server never reached yet."""


class McpServers:
    """The connections to the configured servers and their tools in ``registry``."""

    def __init__(self, configs: Mapping[str, McpServerConfig], registry: Registry,
                 env: Mapping[str, str]) -> None:
        self.registry = registry
        self.connections: dict[str, McpConnection] = {}
        self._names: dict[str, list[str]] = {}
        self._retries: list[asyncio.Task[None]] = []
        for name, config in configs.items():
            # a deferred server's toolset brings the tool that loads its tools
            registry.define_toolset(toolset_name(name), [SEARCH_TOOL] if config.defer else [])
            self.connections[name] = McpConnection(config, env=env,
                                                   on_tools=self._listener(config))

    async def __aenter__(self) -> McpServers:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect to every server at once; one that fails is retried in the background."""
        names = list(self.connections)
        results = await asyncio.gather(*(self.connections[n].connect() for n in names),
                                       return_exceptions=True)
        for name, outcome in zip(names, results, strict=True):
            if isinstance(outcome, McpUnavailable):
                log.warning("%s; retrying every %g s", outcome, RETRY_EVERY)
                self._retries.append(asyncio.create_task(self._retry(name),
                                                         name=f"mcp-retry-{name}"))
            elif isinstance(outcome, BaseException):
                raise outcome

    async def close(self) -> None:
        """Stop retrying, end every session, take the tools off the registry."""
        for task in self._retries:
            task.cancel()
        await asyncio.gather(*self._retries, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self.connections.values()))
        for names in self._names.values():
            for name in names:
                self.registry.unregister(name)
        self._names.clear()
        for name in self.connections:
            self.registry.drop_toolset(toolset_name(name))

    async def _retry(self, name: str) -> None:
        while True:
            await asyncio.sleep(RETRY_EVERY)
            try:
                await self.connections[name].connect()
                return
            except McpUnavailable:
                continue

    def _listener(self, config: McpServerConfig) -> Callable[[list[types.Tool]], None]:
        return lambda tools: self._sync(config, tools)

    def _sync(self, config: McpServerConfig, tools: list[types.Tool]) -> None:
        """The server's tools in the registry as just listed."""
        connection = self.connections[config.name]
        for old in self._names.get(config.name, []):
            self.registry.unregister(old)
        made: dict[str, McpTool] = {}
        for remote in tools:
            tool = McpTool(config, remote, connection)
            if tool.name in made or tool.name in self.registry.tools:
                log.warning("MCP server %s: tool %r left out: its name %s is taken",
                            config.name, remote.name, tool.name)
                continue
            made[tool.name] = tool
            self.registry.register(tool)
        self._names[config.name] = list(made)
