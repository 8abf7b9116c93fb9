"""Connections are reused after every streamed reply, on every transport the service uses.

A provider's reader stops at its protocol's end marker (``data: [DONE]``); the HTTP message ends
a moment later (the server's last chunk). Closing the response there made the connection
unusable on HTTP/1.1: every model call opened a new connection (and TLS handshake). The wire
server here sends the last chunk ``END_DELAY`` after ``[DONE]`` and counts the connections it
accepted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bench._tls import TLSFiles, make_tls, server_context
from providers._http import RetryPolicy
from providers._routing import provider_client
from providers.base import ModelRequest
from providers.messages import UserMessage
from providers.openai import OpenAIChatProvider
from tests.providers import collect, fixture
from tests.support.wire_server import Reply, WireServer

FAST = RetryPolicy(attempts=1)
HI = ModelRequest(model="m", messages=[UserMessage(content="hi")])
END_DELAY = 0.05
TRANSPORTS = ["lean-http", "httpcore-http", "lean-https", "httpcore-https"]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_tls(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture(params=TRANSPORTS)
async def wire(request: pytest.FixtureRequest, tls: TLSFiles
               ) -> AsyncIterator[tuple[WireServer, httpx.AsyncClient]]:
    """A wire server (https for the ``-https`` cases) and a client on the named transport:
    ``lean-*`` and ``httpcore-https`` come from the service's own ``provider_client`` (the CA
    trusted through ``SSL_CERT_FILE``); ``httpcore-http`` is httpx's default client."""
    kind, scheme = request.param.split("-")
    async with WireServer(server_context(tls) if scheme == "https" else None) as server:
        if request.param == "httpcore-http":
            client = httpx.AsyncClient()
        else:
            client = provider_client({"SSL_CERT_FILE": str(tls.ca)}, http2=kind == "httpcore",
                                     timeout=httpx.Timeout(5), max_connections=10)
        async with client:
            yield server, client


def _provider(server: WireServer, client: httpx.AsyncClient) -> OpenAIChatProvider:
    return OpenAIChatProvider(client=client, base_url=server.url + "/v1", api_key="k",
                              retry=FAST)


def _reply(end_delay: float = END_DELAY) -> Reply:
    return Reply(chunks=[fixture("openai_chat/text.sse")], end_delay=end_delay)


async def test_one_connection_for_many_streamed_replies(wire) -> None:
    server, client = wire
    server.replies += [_reply() for _ in range(3)]
    for _ in range(3):
        events, msg = await collect(_provider(server, client), HI)
        assert events[-1].type == "done" and msg["content"][0]["text"] == "héllo 🌍, wörld"
    assert server.connections == 1


async def test_a_body_that_does_not_end_costs_at_most_the_drain_bound(wire) -> None:
    server, client = wire
    server.replies += [_reply(end_delay=10.0), _reply()]
    start = time.perf_counter()
    events, _ = await collect(_provider(server, client), HI)
    assert events[-1].type == "done"
    assert time.perf_counter() - start < 5.0  # DRAIN_SECONDS, not the server's 10 s
    events, _ = await collect(_provider(server, client), HI)
    assert events[-1].type == "done"
    assert server.connections == 2  # the first connection was given up, not reused


async def test_a_stream_abandoned_midway_closes_its_connection_at_once(wire) -> None:
    server, client = wire
    server.replies += [Reply(chunks=[b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'] * 50,
                             delay=0.02), _reply()]
    stream = _provider(server, client).stream(HI)
    async for event in stream:
        if event.type == "text_delta":
            break
    await stream.aclose()  # type: ignore[attr-defined]
    events, _ = await collect(_provider(server, client), HI)
    assert events[-1].type == "done"
    assert server.connections == 2


async def test_a_cancelled_reader_does_not_wait_for_the_body(wire) -> None:
    server, client = wire
    server.replies.append(_reply(end_delay=5.0))
    provider = _provider(server, client)

    async def read() -> None:
        async for _ in provider.stream(HI):
            await asyncio.sleep(10)  # cancelled here, mid-stream

    task = asyncio.create_task(read())
    await asyncio.sleep(0.2)
    start = time.perf_counter()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.perf_counter() - start < 3.0  # not the body's 5 s
