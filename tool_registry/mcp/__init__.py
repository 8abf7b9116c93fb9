"""MCP servers as tool sources, through the official ``mcp`` SDK's client (``config``: what
a server declaration says; ``connection``: one session, reconnected on demand; ``tools``: a
server's tool as ours; ``content``: its results as ours; ``servers``: the operator's servers
as toolsets of a registry)."""

from tool_registry.mcp.config import McpConfigError, McpServerConfig, expand, parse_servers
from tool_registry.mcp.connection import McpConnection, McpUnavailable
from tool_registry.mcp.servers import McpServers
from tool_registry.mcp.tools import SOURCE, McpTool, tool_name, toolset_name

__all__ = ["SOURCE", "McpConfigError", "McpConnection", "McpServerConfig", "McpServers",
           "McpTool", "McpUnavailable", "expand", "parse_servers", "tool_name", "toolset_name"]
