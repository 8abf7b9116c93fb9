"""``http_fetch``: GET a public web page and return its readable text.

SSRF guard: ``providers.safe_fetch`` (every resolved address checked, the request pinned to
the checked IP, each redirect hop checked the same way); ``settings.fetch_allow_private``
lifts the check except for cloud metadata addresses, which are always refused. No proxy from
the environment is used (it would bypass the check). Size (``fetch_max_bytes``) and time
(``fetch_timeout``, redirects included) are capped.

A shared ``httpx.AsyncClient`` may be injected as ``ctx.extra["http_client"]`` (it must not use
a proxy); otherwise each call makes a short-lived one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from providers.safe_fetch import fetch
from tool_registry import function
from tool_registry.builtin._html import html_to_text
from tool_registry.builtin._limits import cap_text
from tool_registry.builtin.files import UNTRUSTED_CHANNELS
from tool_registry.builtin.settings import current
from tool_registry.types import ToolContext, ToolResult

USER_AGENT = "agentloop-http-fetch/0.1"


@asynccontextmanager
async def _client(ctx: ToolContext) -> AsyncIterator[httpx.AsyncClient]:
    shared = ctx.extra.get("http_client")
    if isinstance(shared, httpx.AsyncClient):
        yield shared
        return
    async with httpx.AsyncClient(trust_env=False, timeout=current().fetch_timeout) as client:
        yield client


def _render(url: httpx.URL, response: httpx.Response, body: bytes, cut: bool) -> ToolResult:
    ctype = response.headers.get("content-type", "")
    kind = ctype.split(";")[0].strip().lower()
    head = f"URL: {url}\nStatus: {response.status_code}\nContent-Type: {ctype or '?'}\n\n"
    if kind in ("text/html", "application/xhtml+xml") or (not kind and b"<html" in body[:512]):
        text = html_to_text(body.decode(response.encoding or "utf-8", "replace"))
    elif kind.startswith("text/") or kind.endswith(("json", "xml", "javascript")) or not kind:
        text = body.decode(response.encoding or "utf-8", "replace")
    else:
        text = f"(binary content, {len(body)} bytes, not shown)"
    if cut:
        text += f"\n[body cut at {len(body)} bytes]"
    text = cap_text(head + text, current().output_cap_chars)
    return ToolResult.text(text, details={"url": str(url), "status": response.status_code},
                           is_error=response.status_code >= 400)


@function(unsafe_in=UNTRUSTED_CHANNELS)
async def http_fetch(url: str, ctx: ToolContext) -> ToolResult:
    """Fetch a public web page (HTTP GET) and return its readable text.

    Args:
        url: An http:// or https:// URL on the public internet.
    """
    limit = current().fetch_timeout
    try:
        async with asyncio.timeout(limit), _client(ctx) as client:
            return await _follow(client, url)
    except TimeoutError:
        raise TimeoutError(f"fetching {url!r} took longer than {limit:g} s") from None


async def _follow(client: httpx.AsyncClient, url: str) -> ToolResult:
    fetched = await fetch(client, url, allow_private=current().fetch_allow_private,
                          max_bytes=current().fetch_max_bytes, user_agent=USER_AGENT)
    # a 2 MB page takes a second or more to turn into text: never on the event loop
    return await asyncio.to_thread(_render, fetched.url, fetched.response, fetched.body,
                                   fetched.cut)
