"""The one HTTP client every provider shares: which transport carries which URL.

``provider_client`` routes each request by its URL, as curl and httpx read the proxy variables:

- a URL that a proxy variable (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, lower case wins)
  covers, and that ``NO_PROXY`` does not exempt, goes through httpx's own transport for that
  proxy (they are the ones that speak to proxies, ``CONNECT`` tunnels included);
- every other URL goes direct: the lean HTTP/1.1 transport (``providers._transport``) for
  ``http://``, and for ``https://`` too unless HTTP/2 is asked for, when httpcore's HTTP/2
  carries it.

So ``NO_PROXY`` alone, or a proxy for other hosts, leaves the direct path as fast as with no
proxy settings at all (before, any proxy variable switched every URL to httpx's default
transport). The variables are read from the mapping given (the process environment overlaid on
``.env``), not from ``os.environ`` behind the caller's back: ``trust_env`` is off.

TLS trusts ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set (how deployments add a private CA),
else certifi's bundle, as httpx does; each transport gets its own context (httpcore sets ALPN on
the context it is given, and the lean transport must offer HTTP/1.1 only).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping

import certifi
import httpx

from providers._prepared import ProviderClient
from providers._transport import LeanHTTP1Transport


def environment_proxies(env: Mapping[str, str]) -> dict[str, str]:
    """``{scheme: proxy URL, "no": hosts}`` as ``urllib.request.getproxies_environment`` reads
    them, from ``env``: ``<scheme>_proxy`` in any case, lower case winning; an empty lower-case
    variable unsets its scheme; ``HTTP_PROXY`` is ignored under CGI (``REQUEST_METHOD`` set)."""
    proxies: dict[str, str] = {}
    for name, value in env.items():
        low = name.lower()
        if value and low.endswith("_proxy"):
            proxies[low[:-6]] = value
    if "REQUEST_METHOD" in env:
        proxies.pop("http", None)
    for name, value in env.items():
        if name.endswith("_proxy"):
            if value:
                proxies[name[:-6]] = value
            else:
                proxies.pop(name[:-6], None)
    return proxies


def proxy_patterns(env: Mapping[str, str]) -> dict[str, str | None]:
    """httpx mount patterns → proxy URL (None: go direct), from ``env`` (httpx's own reading of
    ``NO_PROXY``: ``example.com`` exempts it and its subdomains, ``.example.com`` subdomains
    only, IPs and ``localhost`` exactly, ``*`` everything)."""
    found = environment_proxies(env)
    out: dict[str, str | None] = {}
    for scheme in ("http", "https", "all"):
        if url := found.get(scheme):
            out[f"{scheme}://"] = url if "://" in url else f"http://{url}"
    if not out:
        return {}  # NO_PROXY alone exempts hosts from nothing: everything goes direct
    for host in (h.strip() for h in found.get("no", "").split(",")):
        if host == "*":
            return {}
        if host:
            out[_no_proxy_pattern(host)] = None
    return out


def _no_proxy_pattern(host: str) -> str:
    if "://" in host:
        return host
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return f"all://{host}" if host.lower() == "localhost" else f"all://*{host}"
    return f"all://[{ip}]" if ip.version == 6 else f"all://{ip}"


def ssl_context(env: Mapping[str, str]) -> ssl.SSLContext:
    """A verifying client context: ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else certifi."""
    if cafile := env.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := env.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    return ssl.create_default_context(cafile=certifi.where())


class DirectTransport(httpx.AsyncBaseTransport):
    """No proxy: ``http://`` on the lean transport, ``https://`` on ``https``."""

    def __init__(self, lean: LeanHTTP1Transport, https: httpx.AsyncBaseTransport) -> None:
        self.lean = lean
        self.https = https

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Hand ``request`` to the transport for its scheme."""
        if request.url.scheme == "https":
            return await self.https.handle_async_request(request)
        return await self.lean.handle_async_request(request)

    async def aclose(self) -> None:
        """Close both (the same one twice is harmless)."""
        await self.lean.aclose()
        if self.https is not self.lean:
            await self.https.aclose()


def provider_client(env: Mapping[str, str], *, http2: bool, timeout: httpx.Timeout,
                    max_connections: int) -> httpx.AsyncClient:
    """The shared client (see the module docstring for the routing)."""
    limits = httpx.Limits(max_connections=max_connections,
                          max_keepalive_connections=min(max_connections, 200))
    lean_ctx = ssl_context(env)
    lean_ctx.set_alpn_protocols(["http/1.1"])
    lean = LeanHTTP1Transport(verify=lean_ctx, max_idle_per_host=min(max_connections, 200))
    https: httpx.AsyncBaseTransport = lean
    if http2:
        https = httpx.AsyncHTTPTransport(verify=ssl_context(env), http2=True, limits=limits,
                                         trust_env=False)
    direct = DirectTransport(lean, https)
    mounts: dict[str, httpx.AsyncBaseTransport | None] = {}
    for pattern, proxy in proxy_patterns(env).items():
        mounts[pattern] = direct if proxy is None else httpx.AsyncHTTPTransport(
            proxy=proxy, verify=ssl_context(env), http2=http2, limits=limits, trust_env=False)
    return ProviderClient(transport=direct, mounts=mounts, timeout=timeout, limits=limits,
                          trust_env=False)
