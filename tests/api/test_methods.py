"""A 405 lists every method of the path in ``Allow``; ``HEAD`` is answered wherever ``GET`` is,
the events stream included (headers only, at once, even while the run is live)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from providers import fake
from tests.api.conftest import Api, serve
from tests.api.test_flows import metric
from tests.support.sse_client import read_all


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("PUT", "/runs", "GET, HEAD, POST"),
    ("DELETE", "/runs/run_x", "GET, HEAD"),
    ("GET", "/runs/run_x/cancel", "POST"),
    ("PATCH", "/runs/run_x/queue/msg_1", "DELETE"),
    ("POST", "/runs/run_x/events", "GET, HEAD"),
    ("DELETE", "/healthz", "GET, HEAD"),
])
async def test_a_405_lists_every_allowed_method(api_no_worker: Api, method: str, path: str,
                                                allow: str) -> None:
    resp = await api_no_worker.client.request(method, path)
    assert resp.status_code == 405
    assert resp.headers["allow"] == allow
    assert resp.json()["error"]["code"] == "method_not_allowed"


async def test_head_answers_like_get_without_a_body(api_no_worker: Api) -> None:
    client = api_no_worker.client
    for path in ("/healthz", "/runs", "/tools", "/openapi.json"):
        got, head = await client.get(path), await client.head(path)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
    missing = await client.head("/runs/run_missing")
    assert missing.status_code == 404 and missing.content == b""


async def subscribers(api: Api) -> float:
    text = (await api.client.get("/metrics")).text
    return metric(text, "agentloop_sse_subscribers")


async def test_head_of_a_live_events_stream_returns_its_headers_at_once() -> None:
    async with serve(api_key="k1", api_keys="k1:t1") as api:
        api.fake.script = [fake.hanging("thinking about it")]
        run = await api.create(tools=[])
        url = f"{run['events_url']}?token={run['stream_token']}"
        before = await subscribers(api)
        async with httpx.AsyncClient(base_url=api.url, timeout=10) as anonymous:
            async with asyncio.timeout(10):  # a GET would tail the live run until it ends
                head = await anonymous.head(url)
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-type"].startswith("text/event-stream")
            async with asyncio.timeout(10):  # and the server stops the stream behind it
                while await subscribers(api) != before:
                    await asyncio.sleep(0.02)
            assert (await anonymous.head(run["events_url"])).status_code == 401
        assert (await api.client.post(f"/runs/{run['id']}/cancel")).status_code == 202
        frames = await read_all(api.client, run["events_url"])
        assert frames[-1].event == "agent_end"
        after = await api.client.head(run["events_url"], params={"after": frames[-1].id})
        assert after.status_code == 204
        whole = await api.client.head(run["events_url"])
        assert whole.status_code == 200 and whole.content == b""
