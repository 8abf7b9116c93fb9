"""The exact bytes of an event stream, and what a popular Python SSE parser makes of them.

httpx-sse (pinned in pyproject's dev extra) dispatches an event at every blank line once it has
seen an ``id:`` (it never resets the last event id), and at a blank line after a lone
``retry:``: a ``: ping\\n\\n`` keep-alive, or a ``retry:`` with a blank line of its own, reached
its callers as an event with empty data. Our frames must not: the only blank line we send ends
a block that holds ``data:``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from providers import fake
from tests.api.conftest import Api, serve
from tests.api.test_events import append, end
from tests.support.sse_client import open_stream
from tests.support.tcp_proxy import TcpProxy

PACED = 0.25
"""Seconds between two provider events: longer than the test ping interval (0.2 s), so the
stream carries pings between events."""


def paced_run(api: Api) -> None:
    api.fake.script = [fake.text("one two", chunks=2, delay=PACED)]


def check_framing(raw: bytes) -> None:
    """Every line is a field we send or the ping comment; every blank line ends a block that
    has a ``data:`` line; nothing is left after the last block but comments."""
    *blocks, tail = raw.split(b"\n\n")
    assert tail.strip(b"\n") == b"" or all(
        line == b": ping" for line in tail.strip(b"\n").split(b"\n")), tail
    for block in blocks:
        lines = block.split(b"\n")
        assert any(line.startswith(b"data: ") for line in lines), block
        for line in lines:
            assert line == b": ping" or line.split(b": ", 1)[0] in (
                b"retry", b"id", b"event", b"data"), line


async def test_stream_bytes_open_with_retry_ping_as_one_line_blank_lines_only_after_data(
) -> None:
    async with serve() as api:
        paced_run(api)
        run = await api.create(tools=[])
        async with api.client.stream("GET", run["events_url"]) as resp:
            raw = b"".join([chunk async for chunk in resp.aiter_raw()])
        headers = resp.headers
    assert raw.startswith(b"retry: 1000\nid: 1\nevent: run_created\ndata: ")
    assert raw.count(b": ping\n") >= 2, raw  # the stream really idled between events
    # what sse-starlette's EventSourceResponse sends, which EventStreamResponse copies
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert (headers["cache-control"], headers["x-accel-buffering"]) == ("no-store", "no")
    assert b": ping\n\n" not in raw
    check_framing(raw)


async def test_httpx_sse_sees_every_event_once_and_no_empty_ones() -> None:
    async with serve() as api:
        paced_run(api)
        run = await api.create(tools=[])
        async with aconnect_sse(api.client, "GET", run["events_url"]) as source:
            events = [sse async for sse in source.aiter_sse()]
        assert [e.data for e in events if not e.data] == []
        parsed = [json.loads(e.data) for e in events]
        assert [e.id for e in events] == [str(n) for n in range(1, len(events) + 1)]
        assert [p["seq"] for p in parsed] == list(range(1, len(events) + 1))
        assert [e.event for e in events] == [p["type"] for p in parsed]
        assert parsed[-1]["type"] == "agent_end" and parsed[-1]["depth"] == 0
        assert events[0].retry == 1000 and all(e.retry is None for e in events[1:])
        assert sum(p["type"] == "message_update" for p in parsed) == 2
        # a client that reconnects after the end learns the run is over from the status
        async with aconnect_sse(api.client, "GET", run["events_url"],
                                headers={"Last-Event-ID": events[-1].id}) as source:
            assert source.response.status_code == 204


async def test_httpx_sse_resumes_mid_run_with_last_event_id(api: Api) -> None:
    """Both backends: a second connection resumes mid-run where the first left off."""
    paced_run(api)
    run = await api.create(tools=[])
    async with aconnect_sse(api.client, "GET", run["events_url"]) as source:
        first = []
        async for sse in source.aiter_sse():
            first.append(sse)
            if len(first) == 3:
                break
    async with aconnect_sse(api.client, "GET", run["events_url"],
                            headers={"Last-Event-ID": first[-1].id}) as source:
        rest = [sse async for sse in source.aiter_sse()]
    events = first + rest
    assert all(e.data for e in events)
    assert [int(e.id) for e in events] == list(range(1, len(events) + 1))
    assert json.loads(events[-1].data)["type"] == "agent_end"
    assert rest[0].retry == 1000  # every connection opens with the hint


async def test_ping_keeps_an_idle_stream_alive_through_an_idle_timeout_proxy() -> None:
    """A proxy that cuts connections idle for 1 s (nginx's proxy_read_timeout, a cloud load
    balancer's idle timeout): the one-line comment ping (every 0.1 s here) keeps the stream
    open across several idle windows; with pings rarer than the timeout it is cut."""
    for ping, survives in ((0.1, True), (30.0, False)):
        async with serve(worker=False, sse_ping_seconds=ping) as api, \
                TcpProxy(api.server.port, idle_timeout=1.0) as proxy, \
                httpx.AsyncClient(base_url=proxy.url) as client:
            run = await api.create()
            async with open_stream(client, run["events_url"]) as stream:
                frames = []
                try:
                    async with asyncio.timeout(15):
                        async for frame in stream:
                            frames.append(frame.id)
                            if len(frames) == 1:
                                await asyncio.sleep(2.5)  # idle: 2.5 proxy timeouts
                                await append(api, run["id"], end())
                except httpx.RemoteProtocolError:
                    pass  # the proxy cut the stream mid-body
            assert (frames == [1, 2]) is survives, (ping, frames)
            assert (proxy.idle_closed == 0) is survives


async def test_an_event_stream_response_has_sse_starlettes_headers_on_each_path() -> None:
    """``EventStreamResponse`` copies the headers sse-starlette's ``__init__`` makes instead of
    running it; a request for sse-starlette's own path (``HEAD`` reaching the response) runs
    it then, keeping headers set on the response since."""
    from sse_starlette import EventSourceResponse

    from app.delivery.sse import EventStreamResponse

    async def frames() -> AsyncIterator[bytes]:
        yield b"id: 1\nevent: e\ndata: {}\n\n"

    expected = EventSourceResponse(frames(), ping=0, sep="\n").raw_headers
    for method in ("GET", "HEAD"):
        response = EventStreamResponse(frames())
        assert response.raw_headers == expected
        response.headers["x-extra"] = "1"  # as the dialects add theirs
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            await asyncio.sleep(10)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any], sent: list[dict[str, Any]] = sent) -> None:
            sent.append(message)

        scope = {"type": "http", "method": method, "path": "/x", "headers": []}
        await asyncio.wait_for(response(scope, receive, send), 10)
        start = sent[0]
        assert start["type"] == "http.response.start" and start["status"] == 200
        assert dict(start["headers"]) == dict(expected) | {b"x-extra": b"1"}, method
        body = b"".join(m.get("body", b"") for m in sent[1:])
        assert body == (b"" if method == "HEAD" else b"id: 1\nevent: e\ndata: {}\n\n")
        assert sent[-1].get("more_body") is False
