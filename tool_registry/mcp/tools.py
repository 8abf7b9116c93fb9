"""An MCP server's tool as one of ours: ``<server>__<tool>`` on menus, its input schema as
the spec's parameters (arguments are checked against it before the call: the model gets a
precise ``is_error`` result instead of a round trip), the call made through the server's
``McpConnection``. A server's error result stays an ``is_error`` result; a protocol error, a
lost link or an unreachable server raises, which the loop turns into one too."""

from __future__ import annotations

import re
from typing import Any

from mcp import types

from providers.base import ToolSpec
from tool_registry.mcp.config import McpServerConfig
from tool_registry.mcp.connection import McpConnection
from tool_registry.mcp.content import to_result
from tool_registry.registry import WrappedTool
from tool_registry.types import ToolContext, ToolOptions, ToolResult

SOURCE = "mcp"
"""The ``source`` of an MCP tool's events."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
NAME_MAX = 64


def tool_name(server: str, remote: str) -> str:
    """Our name of ``server``'s tool ``remote``: characters providers refuse become ``_``,
    cut at 64."""
    return f"{server}__{_UNSAFE.sub('_', remote)}"[:NAME_MAX]


def toolset_name(server: str) -> str:
    """The toolset of a server's tools."""
    return f"mcp:{server}"


class McpTool(WrappedTool):
    """One tool of one MCP server."""

    source = SOURCE

    def __init__(self, config: McpServerConfig, remote: types.Tool,
                 connection: McpConnection) -> None:
        spec = ToolSpec(name=tool_name(config.name, remote.name),
                        description=remote.description or remote.title or remote.name,
                        parameters=_object_schema(remote.inputSchema))
        options = ToolOptions(timeout=config.timeout, defer=config.defer,
                              toolsets=(toolset_name(config.name),),
                              approval=config.needs_approval(remote.name))
        super().__init__(spec, self._call, options)
        self.server = config.name
        self.remote_name = remote.name
        self._connection = connection

    async def _call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        async def report(progress: float, total: float | None, message: str | None) -> None:
            update: dict[str, Any] = {"progress": progress, "total": total}
            if message:
                update["message"] = message
            ctx.progress(update)

        result = await self._connection.call(self.remote_name, args, report)
        return to_result(result)


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The input schema as providers take it (an object schema, ``properties`` present)."""
    out = dict(schema)
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out
