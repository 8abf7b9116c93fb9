"""The lean HTTP/1.1 transport at the wire: keep-alive, early close, failures as httpx errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from providers._transport import LeanHTTP1Transport
from tests.support.wire_server import Reply, WireServer


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=LeanHTTP1Transport(),
                                 timeout=httpx.Timeout(5, read=0.3)) as c:
        yield c


async def test_streams_chunks_and_reuses_the_connection(server, client) -> None:
    server.replies += [Reply(chunks=[b"ab", b"cd", "é".encode()]),
                       Reply(chunks=[b"x" * 100_000], chunked=False)]
    async with client.stream("POST", server.url + "/v1/x?q=1", json={"a": 1}) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        parts = [p async for p in r.aiter_raw()]
    assert b"".join(parts) == "abcdé".encode()
    r2 = await client.get(server.url + "/again")
    assert r2.content == b"x" * 100_000
    assert server.connections == 1
    first = server.requests[0]
    assert first.method == "POST" and first.path == "/v1/x" and first.query == {"q": ["1"]}
    assert first.json == {"a": 1} and first.headers["content-length"] == "7"
    assert first.headers["host"] == f"127.0.0.1:{server.port}"


async def test_a_reader_that_stops_at_its_own_end_marker_keeps_the_connection(
        server, client) -> None:
    server.replies += [Reply(chunks=[b"data: 1\n\ndata: [DONE]\n\n"]), Reply(chunks=[b"ok"])]
    async with client.stream("GET", server.url) as r:
        async for _ in r.aiter_raw():
            await asyncio.sleep(0.05)  # the rest of the message arrives meanwhile
            break  # nothing is left unread on the wire: the connection can be reused
    assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 1


async def test_a_response_closed_early_does_not_poison_the_pool(server, client) -> None:
    server.replies += [Reply(chunks=[b"a", b"b", b"c"], delay=0.05), Reply(chunks=[b"ok"])]
    async with client.stream("GET", server.url) as r:
        async for _ in r.aiter_raw():
            break
    assert (await client.get(server.url)).content == b"ok"
    assert server.connections == 2


async def test_a_server_that_closes_idle_connections_is_retried_transparently(
        server, client) -> None:
    server.replies += [Reply(chunks=[b"1"], close=True), Reply(chunks=[b"2"])]
    assert (await client.get(server.url)).content == b"1"
    await asyncio.sleep(0.05)
    assert (await client.get(server.url)).content == b"2"
    assert server.connections == 2


async def test_failures_are_httpx_errors(server, client) -> None:
    server.replies.append(Reply(chunks=[b"a", b"b"], delay=1.0))
    with pytest.raises(httpx.ReadTimeout):
        async with client.stream("GET", server.url) as r:
            await r.aread()
    server.replies.append(Reply(chunks=[b"a", b"b", b"c"], drop_after=1))
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("GET", server.url) as r:
            await r.aread()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    with pytest.raises(httpx.ConnectError):
        await client.get(f"http://127.0.0.1:{closed_port}/")


async def test_error_statuses_come_back_as_responses(server, client) -> None:
    server.replies.append(Reply(429, [b'{"error":{"message":"slow down"}}'],
                                headers={"retry-after": "2"}, content_type="application/json"))
    r = await client.get(server.url)
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert r.json() == {"error": {"message": "slow down"}}


def test_works_on_uvloop_as_the_service_runs_it() -> None:
    """uvloop calls ``connection_made`` a tick later and its transports are not asyncio's."""
    import uvloop

    async def main() -> list[bytes]:
        async with WireServer() as server:
            server.replies += [Reply(chunks=[b"a", b"b"]) for _ in range(20)]
            async with httpx.AsyncClient(transport=LeanHTTP1Transport()) as c:
                got = await asyncio.gather(*(c.get(server.url) for _ in range(10)))
                got += [await c.get(server.url) for _ in range(10)]
            return [r.content for r in got]

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(main()) == [b"ab"] * 20
