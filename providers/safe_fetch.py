"""GET a URL under the SSRF guard: what ``http_fetch`` and attachment fetching share.

The host is resolved here, every resolved address is checked (``forbidden_reason``) and the
request goes to the checked IP, with the original ``Host`` header and TLS SNI/certificate name,
so a second resolution cannot send it elsewhere. Redirects are followed by hand (at most
``MAX_REDIRECTS``), each hop checked the same way, its scheme included. ``allow_private`` lifts
the check except for cloud metadata addresses, which are always refused. The caller's client
must use no proxy (``trust_env=False``: a proxy would bypass the check). The body is read up to
``max_bytes`` and no further.

``GuardedTransport`` applies the same check and pinning to every request of a client.

Tests stand a loopback server in for a public site by patching this module's
``resolve_host`` and ``forbidden_reason`` (``tests/tools/test_web.py``).

Exceptions::

    PermissionError
     └── FetchRefused      the URL, or a redirect, points somewhere no fetch may go
    ValueError             a name that does not resolve, too many redirects
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_REDIRECTS = 5
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2"))
"""Cloud instance-metadata endpoints (AWS, AWS IPv6, Alibaba, ECS task credentials)."""
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
"""Local-use NAT64 (RFC 8215): where the IPv4 address sits depends on the operator's prefix
length, so the whole range is treated as private."""
WEB_SCHEMES = ("http", "https")


class FetchRefused(PermissionError):
    """The URL (or a redirect) points somewhere no fetch may go."""


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


def literal_reason(host: str, allow_private: bool) -> str | None:
    """Why ``host`` may not be fetched when it is an IP literal (None for a name, which only
    resolving can judge, or for an address that may be fetched)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return forbidden_reason(ip, allow_private)


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal is returned as is)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


async def checked_address(url: httpx.URL, *, allow_private: bool,
                          schemes: Collection[str] = WEB_SCHEMES) -> IPAddress:
    """The address to connect to for ``url``; ``FetchRefused`` if any resolved one is barred
    (or the scheme is not one of ``schemes``)."""
    if url.scheme not in schemes or not url.host:
        allowed = " and ".join(schemes)
        raise FetchRefused(f"only {allowed} URLs can be fetched, not {str(url)!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = await resolve_host(url.host, port)
    except OSError as exc:
        raise ValueError(f"cannot resolve {url.host!r}: {exc}") from exc
    for ip in addresses:  # all of them: the resolver must not pick a barred one for us
        reason = forbidden_reason(ip, allow_private)
        if reason:
            raise FetchRefused(f"refused {str(url)!r}: {url.host} resolves to {ip}, {reason}")
    if not addresses:
        raise ValueError(f"{url.host!r} resolved to no address")
    return addresses[0]


def _pinned(url: httpx.URL, ip: IPAddress) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
    """The URL aimed at ``ip`` plus the Host header and SNI that keep the original name."""
    host_header = url.netloc.decode("ascii")
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    return url.copy_with(host=str(ip)), {"Host": host_header}, extensions


class GuardedTransport(httpx.AsyncBaseTransport):
    """A transport that sends every request under the guard: the host resolved and checked
    (``checked_address``) per request, the request aimed at the checked IP (``Host`` and SNI
    keep the name). For clients that talk to a URL somebody else chose for longer than one
    fetch (a run's own MCP server); it follows no redirects itself."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._inner = httpx.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Check, pin, send."""
        ip = await checked_address(request.url, allow_private=self.allow_private)
        target, headers, extensions = _pinned(request.url, ip)
        request.url = target
        request.headers.update(headers)
        request.extensions = {**request.extensions, **extensions}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True, slots=True)
class Fetched:
    """One fetched response: its final ``url`` (after redirects), the ``response`` (status,
    headers, encoding; its body already read and closed), the ``body`` read and whether it was
    ``cut`` at the cap (it then holds the first ``max_bytes``)."""

    url: httpx.URL
    response: httpx.Response
    body: bytes
    cut: bool

    @property
    def media_type(self) -> str:
        """The response's ``Content-Type`` without parameters, lower case ("" when none)."""
        content_type = str(self.response.headers.get("content-type", ""))
        return content_type.split(";")[0].strip().lower()


async def _get(client: httpx.AsyncClient, url: httpx.URL, *, allow_private: bool,
               max_bytes: int, schemes: Collection[str], user_agent: str) -> Fetched:
    """One checked GET, its body read up to ``max_bytes`` (one byte more tells it was cut)."""
    ip = await checked_address(url, allow_private=allow_private, schemes=schemes)
    target, headers, extensions = _pinned(url, ip)
    headers["User-Agent"] = user_agent
    body = bytearray()
    async with client.stream("GET", target, headers=headers, extensions=extensions,
                             follow_redirects=False) as response:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > max_bytes:
                return Fetched(url, response, bytes(body[:max_bytes]), True)
    return Fetched(url, response, bytes(body), False)


async def post(client: httpx.AsyncClient, url: str, *, content: bytes, headers: dict[str, str],
               allow_private: bool) -> int:
    """POST ``content`` to ``url`` under the guard (the checked address pinned, as ``fetch``
    does): the response's status. Redirects are not followed and the body is not read (a
    webhook receiver answers with its status). No timeout of its own: the client's."""
    target_url = httpx.URL(url)
    ip = await checked_address(target_url, allow_private=allow_private)
    target, pinned, extensions = _pinned(target_url, ip)
    async with client.stream("POST", target, content=content, headers={**headers, **pinned},
                             extensions=extensions, follow_redirects=False) as response:
        return response.status_code


async def fetch(client: httpx.AsyncClient, url: str | httpx.URL, *, allow_private: bool,
                max_bytes: int, user_agent: str,
                schemes: Collection[str] = WEB_SCHEMES) -> Fetched:
    """GET ``url`` under the guard, following redirects (each hop checked); the last
    response is returned whatever its status. No timeout of its own: the caller's."""
    start = current = httpx.URL(url)
    for _ in range(MAX_REDIRECTS + 1):
        fetched = await _get(client, current, allow_private=allow_private, max_bytes=max_bytes,
                             schemes=schemes, user_agent=user_agent)
        location = fetched.response.headers.get("location")
        if not (fetched.response.is_redirect and location):
            return fetched
        current = current.join(location)
    raise ValueError(f"more than {MAX_REDIRECTS} redirects starting from {str(start)!r}")
