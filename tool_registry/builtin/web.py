"""``http_fetch``: GET a public web page and return its readable text.

SSRF guard: the host is resolved here, every resolved address is checked (``forbidden_reason``)
and the request goes to the checked IP, with the original ``Host`` header and TLS SNI/certificate
name. Redirects are followed by hand (at most ``MAX_REDIRECTS``) and each hop is checked the same
way. ``settings.fetch_allow_private`` lifts the check except for cloud metadata addresses, which
are always refused. No proxy from the environment is used (it would bypass the check). Size
(``fetch_max_bytes``) and time (``fetch_timeout``, redirects included) are capped.

A shared ``httpx.AsyncClient`` may be injected as ``ctx.extra["http_client"]`` (it must not use
a proxy); otherwise each call makes a short-lived one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tool_registry import function
from tool_registry.builtin._html import html_to_text
from tool_registry.builtin._limits import cap_text
from tool_registry.builtin.files import UNTRUSTED_CHANNELS
from tool_registry.builtin.settings import current
from tool_registry.types import ToolContext, ToolResult

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_REDIRECTS = 5
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2"))
"""Cloud instance-metadata endpoints (AWS, AWS IPv6, Alibaba, ECS task credentials)."""
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
"""Local-use NAT64 (RFC 8215): where the IPv4 address sits depends on the operator's prefix
length, so the whole range is treated as private."""


class FetchRefused(PermissionError):
    """The URL (or a redirect) points somewhere http_fetch may not go."""


def embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries to a router that unwraps it: IPv4-mapped,
    NAT64 (``64:ff9b::/96``), 6to4 (``2002::/16``) and Teredo (``2001::/32``, server and
    client)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return [v4 for v4 in found if v4 is not None]


def _reason(ip: IPAddress, allow_private: bool) -> str | None:
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if allow_private:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip in _NAT64_LOCAL:
        return "a local-use NAT64 address"
    for attr, what in (("is_loopback", "loopback"), ("is_unspecified", "unspecified"),
                       ("is_link_local", "link-local"), ("is_multicast", "multicast"),
                       ("is_private", "private"), ("is_reserved", "reserved")):
        if getattr(ip, attr):
            return f"a {what} address"
    return None if ip.is_global else "not a public address"


def forbidden_reason(ip: IPAddress, allow_private: bool) -> str | None:
    """Why ``ip`` may not be fetched, or None if it may. An IPv6 address that embeds an IPv4
    one is judged by both (the embedded one decides where a translator sends the packets)."""
    for v4 in embedded_ipv4(ip):
        reason = _reason(v4, allow_private)
        if reason:
            return f"{reason} ({v4} embedded in {ip})"
    if ip in _NAT64 or (isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped):
        return None  # the embedded address alone decides (NAT64 itself is not "global")
    return _reason(ip, allow_private)


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal is returned as is)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


async def checked_address(url: httpx.URL) -> IPAddress:
    """The address to connect to for ``url``; ``FetchRefused`` if any resolved one is barred."""
    if url.scheme not in ("http", "https") or not url.host:
        raise FetchRefused(f"only http and https URLs can be fetched, not {str(url)!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = await resolve_host(url.host, port)
    except OSError as exc:
        raise ValueError(f"cannot resolve {url.host!r}: {exc}") from exc
    allow = current().fetch_allow_private
    for ip in addresses:  # all of them: the resolver must not pick a barred one for us
        reason = forbidden_reason(ip, allow)
        if reason:
            raise FetchRefused(f"refused {str(url)!r}: {url.host} resolves to {ip}, {reason}")
    if not addresses:
        raise ValueError(f"{url.host!r} resolved to no address")
    return addresses[0]


@asynccontextmanager
async def _client(ctx: ToolContext) -> AsyncIterator[httpx.AsyncClient]:
    shared = ctx.extra.get("http_client")
    if isinstance(shared, httpx.AsyncClient):
        yield shared
        return
    async with httpx.AsyncClient(trust_env=False, timeout=current().fetch_timeout) as client:
        yield client


def _pinned(url: httpx.URL, ip: IPAddress) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
    """The URL aimed at ``ip`` plus the Host header and SNI that keep the original name."""
    host_header = url.netloc.decode("ascii")
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    return url.copy_with(host=str(ip)), {"Host": host_header}, extensions


async def _get(client: httpx.AsyncClient, url: httpx.URL) -> tuple[httpx.Response, bytes, bool]:
    """One checked GET: (response, body up to the cap, whether the body was cut)."""
    ip = await checked_address(url)
    target, headers, extensions = _pinned(url, ip)
    headers["User-Agent"] = "agentloop-http-fetch/0.1"
    cap = current().fetch_max_bytes
    body = bytearray()
    async with client.stream("GET", target, headers=headers, extensions=extensions,
                             follow_redirects=False) as response:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > cap:
                return response, bytes(body[:cap]), True
    return response, bytes(body), False


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
            return await _follow(client, httpx.URL(url))
    except TimeoutError:
        raise TimeoutError(f"fetching {url!r} took longer than {limit:g} s") from None


async def _follow(client: httpx.AsyncClient, url: httpx.URL) -> ToolResult:
    start = url
    for _ in range(MAX_REDIRECTS + 1):
        response, body, cut = await _get(client, url)
        location = response.headers.get("location")
        if not (response.is_redirect and location):
            # a 2 MB page takes a second or more to turn into text: never on the event loop
            return await asyncio.to_thread(_render, url, response, body, cut)
        url = url.join(location)
    raise ValueError(f"more than {MAX_REDIRECTS} redirects starting from {str(start)!r}")
