"""What the attachment tests share: an https host for attachments (a ``WireServer`` with a
throw-away CA: attachments are fetched over ``https://`` only), a fetcher that trusts it, the
seam that lets the loopback host pass the SSRF guard, and each adapter built against a model
server that records its requests."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench._tls import TLSFiles, client_context, make_tls, server_context
from providers import safe_fetch
from providers._http import RetryPolicy
from providers._sigv4 import BearerAuth
from providers.anthropic import AnthropicProvider
from providers.attachment_fetch import AttachmentFetcher
from providers.base import ModelRequest, Provider
from providers.bedrock import BedrockProvider
from providers.events import ProviderEvent
from providers.gemini import GeminiProvider
from providers.openai import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider
from tests.support.wire_server import Reply, WireServer

FAST = RetryPolicy(attempts=1, base_delay=0.001, max_delay=0.01)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PDF_BYTES = b"%PDF-1.4\n1 0 obj <<>> endobj\n%%EOF\n"
NOTES = "# Notes\nß and ✓\n"
B64 = {name: base64.b64encode(raw).decode() for name, raw in
       (("png", PNG), ("pdf", PDF_BYTES), ("notes", NOTES.encode()))}
KINDS = ["anthropic", "openai", "compatible", "responses", "gemini", "bedrock"]


def refusal() -> Reply:
    """What the model server answers: a 400 (not retried), the request is all a test reads."""
    return Reply(400, [b'{"error": {"message": "recorded"}}'], content_type="application/json",
                 chunked=False)


def served(body: bytes, content_type: str, status: int = 200, **headers: str) -> Reply:
    """One response of the attachment host."""
    return Reply(status, [body], content_type=content_type, chunked=False, headers=headers)


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_tls(Path(tmp_path_factory.mktemp("attachment-tls")))


@pytest.fixture
async def host(tls: TLSFiles):
    """The https host attachments are fetched from (its certificate names ``localhost``)."""
    async with WireServer(tls=server_context(tls)) as server:
        yield server


def host_url(host: WireServer, path: str) -> str:
    return f"https://localhost:{host.port}{path}"


@pytest.fixture
def public_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test mode: ``localhost`` resolves to 127.0.0.1 and that one address passes the guard
    (the host stands in for a public site); every other address keeps the real check."""
    real_resolve, real_reason = safe_fetch.resolve_host, safe_fetch.forbidden_reason

    async def resolve(name: str, port: int) -> list[safe_fetch.IPAddress]:
        if name == "localhost":
            return [ipaddress.ip_address("127.0.0.1")]
        return await real_resolve(name, port)

    def reason(ip: safe_fetch.IPAddress, allow_private: bool) -> str | None:
        return None if str(ip) == "127.0.0.1" else real_reason(ip, allow_private)

    monkeypatch.setattr(safe_fetch, "resolve_host", resolve)
    monkeypatch.setattr(safe_fetch, "forbidden_reason", reason)


def trusting_client(tls: TLSFiles) -> httpx.AsyncClient:
    """A client for the fetcher: no proxy, the test CA trusted."""
    return httpx.AsyncClient(trust_env=False, verify=client_context(tls), timeout=5.0)


def make_provider(kind: str, client: httpx.AsyncClient, url: str,
                  fetcher: AttachmentFetcher) -> Provider:
    """The adapter ``kind`` pointed at the model server ``url``."""
    if kind == "anthropic":
        return AnthropicProvider(client=client, base_url=url, api_key="k", retry=FAST,
                                 fetcher=fetcher)
    if kind in ("openai", "compatible"):
        return OpenAIChatProvider(client=client, base_url=url, api_key="k", retry=FAST,
                                  fetcher=fetcher, compatible=kind == "compatible")
    if kind == "responses":
        return OpenAIResponsesProvider(client=client, base_url=url, api_key="k", retry=FAST)
    if kind == "gemini":
        return GeminiProvider(client=client, base_url=url, api_key="k", retry=FAST,
                              fetcher=fetcher)
    assert kind == "bedrock"
    return BedrockProvider(client=client, endpoint=url, auth=BearerAuth("t"), retry=FAST,
                           fetcher=fetcher)


async def send(kind: str, model: WireServer, request: ModelRequest,
               fetcher: AttachmentFetcher) -> list[ProviderEvent]:
    """Stream ``request`` through adapter ``kind`` (the model server answers ``refusal``)."""
    model.replies.append(refusal())
    async with httpx.AsyncClient() as client:
        provider = make_provider(kind, client, model.url, fetcher)
        return [e async for e in provider.stream(request)]


def user_content(kind: str, body: dict[str, Any]) -> list[Any]:
    """The first user message's content as ``kind``'s wire holds it."""
    if kind == "gemini":
        return body["contents"][0]["parts"]  # type: ignore[no-any-return]
    if kind == "responses":
        return body["input"][0]["content"]  # type: ignore[no-any-return]
    messages = body["messages"]
    if kind in ("openai", "compatible"):
        messages = [m for m in messages if m["role"] == "user"]
    return messages[0]["content"]  # type: ignore[no-any-return]
