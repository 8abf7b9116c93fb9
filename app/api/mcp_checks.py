"""The checks of a run's own MCP servers (``mcp_servers``), made by the run pipeline: each
name is new (not an operator's server, not given twice: 400 ``invalid_mcp_server``), each
URL matches one of ``AGENTLOOP_MCP_ALLOW_URLS`` (403 ``mcp_server_not_allowed``; with no
patterns a run may add no server) and passes the SSRF guard ``http_fetch`` uses (403
``mcp_server_not_allowed`` for a loopback, private or link-local address unless
``AGENTLOOP_FETCH_ALLOW_PRIVATE``; 422 for a host that does not resolve). Every error names
``mcp_servers[i].<field>``."""

from __future__ import annotations

import fnmatch

import httpx

from app.api.errors import ApiError
from app.api.options import RunMcpServer, RunOptions
from providers.safe_fetch import FetchRefused, checked_address
from tool_registry import Registry
from tool_registry.mcp import toolset_name


def _refused(field: str, why: str) -> ApiError:
    return ApiError(403, "mcp_server_not_allowed", f"{field}: {why}", field)


def check_mcp_names(options: RunOptions, registry: Registry) -> None:
    """400 for a server name an operator's server (or an earlier entry) has."""
    seen: set[str] = set()
    for i, server in enumerate(options.mcp_servers or []):
        field = f"mcp_servers[{i}].name"
        if server.name in seen or registry.has_toolset(toolset_name(server.name)):
            raise ApiError(400, "invalid_mcp_server", f"{field}: {server.name!r} is already "
                           "the name of an MCP server of this run", field)
        seen.add(server.name)


async def check_mcp_urls(options: RunOptions, patterns: list[str], *,
                         allow_private: bool) -> None:
    """403 for a URL no pattern allows or the SSRF guard refuses; 422 for one that does not
    parse or resolve."""
    for i, server in enumerate(options.mcp_servers or []):
        await check_url(server, f"mcp_servers[{i}].url", patterns, allow_private=allow_private)


async def check_url(server: RunMcpServer, field: str, patterns: list[str], *,
                    allow_private: bool) -> None:
    """One server's URL (see the module docstring)."""
    if not any(fnmatch.fnmatchcase(server.url, p) for p in patterns):
        raise _refused(field, "this server allows a run's own MCP servers only at the URLs "
                       "AGENTLOOP_MCP_ALLOW_URLS lists" + ("" if patterns else " (none)"))
    try:
        await checked_address(httpx.URL(server.url), allow_private=allow_private)
    except FetchRefused as exc:
        raise _refused(field, str(exc)) from exc
    except (ValueError, httpx.InvalidURL) as exc:
        raise ApiError(422, "validation_error", f"{field}: {exc}", field) from exc
