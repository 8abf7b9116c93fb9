"""Model requests built from parts prepared once (``providers._prepared``) are the requests
``build_request`` builds, and cookies still work: a provider's ``Set-Cookie`` is kept by the
shared client and sent with the next call, on the adapters' path at the wire."""

from __future__ import annotations

import httpx
import pytest

from app.config import load_settings
from app.process.setup import provider_client
from providers._http import RetryPolicy
from providers._prepared import PreparedPost, ProviderClient
from providers.base import ModelRequest
from providers.messages import UserMessage
from providers.openai import OpenAIChatProvider
from tests.providers import collect, fixture
from tests.support.wire_server import Reply, WireServer

FAST = RetryPolicy(attempts=1, base_delay=0.001, max_delay=0.01)
HI = ModelRequest(model="gpt-4.1-mini", messages=[UserMessage(content="hi")])
HEADERS = {"content-type": "application/json", "accept": "text/event-stream",
           "authorization": "Bearer sk-x"}


def _same(a: httpx.Request, b: httpx.Request) -> None:
    assert (a.method, a.url, a.headers.raw, a.extensions, a.read()) == (
        b.method, b.url, b.headers.raw, b.extensions, b.read())


@pytest.mark.parametrize("limits", [None, httpx.Timeout(3.0, read=40.0)])
async def test_a_prepared_post_is_the_request_build_request_builds(
        limits: httpx.Timeout | None) -> None:
    async with ProviderClient(timeout=httpx.Timeout(7.0)) as client:
        url = "https://api.example.com:8443/v1/chat/completions?api-version=1"
        post = PreparedPost(client, url, HEADERS, limits)
        body = b'{"model":"m","messages":[]}'
        built = client.build_request("POST", url, content=body, headers=HEADERS,
                                     timeout=limits or httpx.USE_CLIENT_DEFAULT)
        _same(post.build(body), built)
        first, second = post.build(b"1"), post.build(b"22")
        assert first.extensions is not second.extensions  # each request its own
        assert (first.headers["content-length"], second.headers["content-length"]) == ("1", "2")


async def test_with_a_cookie_held_the_prepared_post_sends_it() -> None:
    async with ProviderClient() as client:
        client.cookies.set("gw", "abc", domain="api.example.com")
        post = PreparedPost(client, "https://api.example.com/v1/x", HEADERS, None)
        request = post.build(b"{}")
        assert request.headers["cookie"] == "gw=abc"
        _same(request, client.build_request("POST", "https://api.example.com/v1/x",
                                            content=b"{}", headers=HEADERS))


async def test_cookies_are_read_only_from_responses_that_set_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    original = httpx.Cookies.extract_cookies

    def counting(self: httpx.Cookies, response: httpx.Response) -> None:
        reads.append(response.headers.get("set-cookie", ""))
        original(self, response)

    monkeypatch.setattr(httpx.Cookies, "extract_cookies", counting)
    async with WireServer() as server:
        server.replies += [Reply(chunks=[b"a"], content_type="text/plain"),
                           Reply(chunks=[b"b"], content_type="text/plain",
                                 headers={"set-cookie": "gw=1; Path=/"})]
        async with ProviderClient() as client:
            await client.get(server.url + "/x")
            await client.get(server.url + "/y")
            assert reads == ["gw=1; Path=/"]
            assert client.cookies.get("gw") == "1"
            client.cookies = {"other": "2"}  # the setter keeps the skipping store
            assert client.cookies.get("other") == "2" and client.cookies.get("gw") is None
            server.replies.append(Reply(chunks=[b"c"], content_type="text/plain"))
            await client.get(server.url + "/z")
    assert reads == ["gw=1; Path=/"]


async def test_a_providers_cookie_comes_back_on_its_next_call() -> None:
    """The shared client of the service (``provider_client``), the Chat Completions adapter:
    a gateway's ``Set-Cookie`` on one reply is sent with the next call, as before."""
    async with WireServer() as server:
        text = fixture("openai_chat/text.sse")
        server.replies += [Reply(chunks=[text], headers={"set-cookie": "gw=abc; Path=/"}),
                           Reply(chunks=[text])]
        async with provider_client(load_settings(), {}) as client:
            assert isinstance(client, ProviderClient)
            chat = OpenAIChatProvider(client=client, base_url=server.url + "/v1",
                                      api_key="sk-test", retry=FAST)
            for _ in range(2):
                _, msg = await collect(chat, HI)
                assert msg["stop_reason"] == "stop"
    first, second = server.requests
    assert "cookie" not in first.headers
    assert second.headers["cookie"] == "gw=abc"
    assert first.headers["authorization"] == second.headers["authorization"] == "Bearer sk-test"
