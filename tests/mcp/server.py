"""A real MCP server for the tests, built with the official SDK's ``FastMCP``.

    python -m tests.mcp.server http PORT     streamable HTTP at /mcp and SSE at /sse, one port
    python -m tests.mcp.server stdio         over stdin/stdout

Its tools cover what agentloop maps: text, structured output, an image, a resource link, a
server-side error, progress, a call that waits until it is cancelled (``hang``; ``cancelled``
says whether it was), a change of the tool list (``grow``) and the caller's headers.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys

import uvicorn
from mcp import types
from mcp.server.fastmcp import Context, FastMCP, Image
from starlette.applications import Starlette

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
CANCELLED: set[str] = set()
server = FastMCP("test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def fail(why: str = "boom") -> str:
    """Always fails."""
    raise ValueError(why)


@server.tool()
def picture() -> Image:
    """A one-pixel image."""
    return Image(data=PNG, format="png")


@server.tool()
def link() -> types.ResourceLink:
    """A link to a resource."""
    return types.ResourceLink(type="resource_link", name="readme", uri="file:///readme.md",
                              mimeType="text/markdown")


@server.tool()
async def slow(steps: int, ctx: Context) -> str:  # type: ignore[type-arg]
    """Reports progress ``steps`` times."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await asyncio.sleep(0.02)
    return f"did {steps} steps"


@server.tool()
async def hang(key: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Runs until cancelled (reporting progress once, when it starts)."""
    await ctx.report_progress(0, None, "started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        CANCELLED.add(key)
        raise
    return "never"


@server.tool()
async def cancelled(key: str) -> bool:
    """Whether ``hang(key)`` was cancelled (waits up to 5 s for it)."""
    for _ in range(250):
        if key in CANCELLED:
            return True
        await asyncio.sleep(0.02)
    return False


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
async def grow(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
    """Adds a tool ``name`` and tells the client its list changed."""
    def extra() -> str:
        return f"{name} here"

    server.add_tool(extra, name=name, description=f"the {name} tool")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
    """The Authorization header the call came with."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None) or {}
    return str(headers.get("authorization", "(none)"))


def http_app() -> Starlette:
    streamable = server.streamable_http_app()
    sse = server.sse_app()
    return Starlette(routes=[*streamable.routes, *sse.routes],
                     lifespan=lambda app: server.session_manager.run())


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        uvicorn.run(http_app(), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
