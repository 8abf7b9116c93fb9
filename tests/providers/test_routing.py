"""Proxy variables route per URL; where no proxy applies the lean transport carries the call.

Before: any proxy variable in the environment (even ``NO_PROXY`` alone) sent every model call
through httpx's default transport, and a proxy set only in ``.env`` switched transports without
being used. The "proxy" here is a wire server: a forward proxy receives the absolute URL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.config import load_settings
from app.process.setup import provider_client
from providers._routing import environment_proxies, proxy_patterns
from tests.support.wire_server import Reply, WireServer

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
async def proxy() -> AsyncIterator[WireServer]:
    async with WireServer() as srv:
        yield srv


def _lean(response: httpx.Response) -> bool:
    """The lean transport's responses carry no httpcore network stream."""
    return "network_stream" not in response.extensions


def test_no_proxy_alone_routes_nothing_anywhere() -> None:
    assert proxy_patterns({"NO_PROXY": "127.0.0.1,localhost"}) == {}
    assert proxy_patterns({"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "*"}) == {}


def test_patterns_follow_curl_and_httpx() -> None:
    got = proxy_patterns({"HTTPS_PROXY": "p:3128", "http_proxy": "http://q:8080",
                          "NO_PROXY": "localhost, 10.0.0.1,::1,.internal,example.com"})
    assert got == {"https://": "http://p:3128", "http://": "http://q:8080",
                   "all://localhost": None, "all://10.0.0.1": None, "all://[::1]": None,
                   "all://*.internal": None, "all://*example.com": None}


def test_lower_case_wins_and_cgi_ignores_http_proxy() -> None:
    env = {"HTTPS_PROXY": "http://upper", "https_proxy": "http://lower"}
    assert environment_proxies(env) == {"https": "http://lower"}
    assert environment_proxies({"HTTP_PROXY": "http://x", "REQUEST_METHOD": "GET"}) == {}
    assert environment_proxies({"HTTP_PROXY": "http://x", "http_proxy": ""}) == {}


async def test_no_proxy_alone_keeps_the_lean_transport_and_its_connection(
        server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    server.replies += [Reply(chunks=[b"ok"], end_delay=0.02) for _ in range(3)]
    async with provider_client(load_settings(), {"NO_PROXY": "127.0.0.1,localhost"}) as client:
        got = [await client.get(server.url + "/v1/models") for _ in range(3)]
    assert [r.content for r in got] == [b"ok"] * 3
    assert all(_lean(r) for r in got)
    assert server.connections == 1


async def test_a_proxy_carries_what_it_covers_and_no_proxy_hosts_go_direct(
        server: WireServer, proxy: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"HTTP_PROXY": proxy.url, "NO_PROXY": "localhost"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    proxy.replies.append(Reply(chunks=[b"via proxy"]))
    server.replies.append(Reply(chunks=[b"direct"]))
    async with provider_client(load_settings(), env) as client:
        proxied = await client.get(server.url + "/v1/x")
        direct = await client.get(f"http://localhost:{server.port}/v1/y")
    assert proxied.content == b"via proxy" and proxy.requests[0].path == "/v1/x"
    assert direct.content == b"direct" and _lean(direct)
    assert [r.path for r in server.requests] == ["/v1/y"]


async def test_a_proxy_set_only_in_dotenv_is_used(server: WireServer, proxy: WireServer) -> None:
    """``provider_env()`` overlays ``.env``; the routing reads that mapping, not os.environ."""
    proxy.replies.append(Reply(chunks=[b"via proxy"]))
    async with provider_client(load_settings(), {"HTTP_PROXY": proxy.url}) as client:
        got = await client.get(server.url + "/v1/x")
    assert got.content == b"via proxy" and server.requests == []
