"""A run's own MCP servers (its ``mcp_servers`` option), connected by the worker that drives
the run: whichever process that is (the embedded worker, ``agentloop worker``) reads them from
the run's record, connects through the SSRF guard (``GuardedTransport``: every request's host
resolved and checked again and the request sent to the checked address, so a name that
resolves elsewhere now than when the pipeline checked it gets nowhere), and adds the servers'
tools to the run's
menu under the same gating as any tool (``tools_allow``, ``tools_deny``, the operator's
disabled tools). The connections last as long as the run's attempt: a parked run connects
again when it is woken.

A server that cannot be reached leaves its tools off the menu (logged); the run goes on.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from providers.safe_fetch import GuardedTransport
from tool_registry import Menu
from tool_registry.mcp import McpConnection, McpServerConfig, McpTool

log = logging.getLogger(__name__)


class RunServers:
    """The connections of one run's own MCP servers."""

    def __init__(self) -> None:
        self.connections: list[McpConnection] = []

    async def close(self) -> None:
        """End every session."""
        await asyncio.gather(*(c.close() for c in self.connections))
        self.connections.clear()


async def open_run_servers(request: dict[str, Any], menu: Menu, *, allow_private: bool,
                           disabled: Iterable[str]) -> RunServers:
    """Connect to the run's servers and put their tools on ``menu``."""
    servers = RunServers()
    specs: list[dict[str, Any]] = request.get("mcp_servers") or []
    if not specs:
        return servers
    configs = [McpServerConfig(name=s["name"], url=s["url"], headers=s.get("headers") or {})
               for s in specs]
    connections = await asyncio.gather(*(_connect(c, allow_private) for c in configs))
    servers.connections = [c for c in connections if c is not None]
    off = set(disabled)
    for connection in servers.connections:
        for remote in connection.tools:
            tool = McpTool(connection.config, remote, connection)
            if tool.name not in menu.tools and _offered(tool.name, request, off):
                menu.tools[tool.name] = tool  # a name taken keeps its first tool
    return servers


async def _connect(config: McpServerConfig, allow_private: bool) -> McpConnection | None:
    connection = McpConnection(  # its headers are taken literally (env None)
        config, env=None, http_transport=lambda: GuardedTransport(allow_private=allow_private))
    try:
        await connection.connect()
    except Exception as exc:  # refused, unresolvable or unreachable: its tools stay off
        log.warning("run MCP server %s (%s): not connected: %s", config.name, config.url, exc)
        await connection.close()
        return None
    return connection


def _offered(name: str, request: dict[str, Any], disabled: set[str]) -> bool:
    allow: Sequence[str] | None = request.get("tools_allow")
    deny: Sequence[str] = request.get("tools_deny") or ()
    if name in disabled or any(fnmatch.fnmatchcase(name, p) for p in deny):
        return False
    return allow is None or any(fnmatch.fnmatchcase(name, p) for p in allow)
