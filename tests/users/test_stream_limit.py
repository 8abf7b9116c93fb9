"""``AGENTLOOP_MAX_STREAMS_PER_USER`` (2 here): an end user's open streams in a process are
counted across every door (a run's events, the AI SDK's and AG-UI's streams, ``/mcp``), one
more is ``429 too_many_streams`` in that door's error shape before anything streams; another
user, the tenant's key and a closed stream's room are unaffected; a stream token for the
user's run counts with the user's streams, one for the tenant's own run not at all. Over a
real socket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from providers.fake import hanging
from tests.api.conftest import Api, serve
from tests.support.errors import api_error

LIMIT = 2


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Api]:
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents:\n  - name: helper\n    model: fake:test\n    toolset: none\n")
    async with serve(api_keys="key-t:t", agents_file=agents,
                     max_streams_per_user=LIMIT) as api:
        api.fake.script = [hanging("…") for _ in range(20)]
        yield api


async def token(api: Api, subject: str) -> str:
    resp = await api.client.post("/client_tokens", json={"subject": subject},
                                 headers={"Authorization": "Bearer key-t"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["token"])


def client(api: Api, credential: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}
    return httpx.AsyncClient(base_url=api.url, headers=headers, timeout=10.0)


async def opened(stack: AsyncExitStack, http: httpx.AsyncClient, method: str, path: str,
                 **kw: Any) -> httpx.Response:
    """The response with its stream left open (until ``stack`` closes); a refusal read."""
    resp = await stack.enter_async_context(http.stream(method, path, **kw))
    if resp.status_code != 200:
        await resp.aread()
    return resp


def too_many(resp: httpx.Response) -> None:
    assert resp.status_code == 429, resp.text
    assert api_error(resp)["code"] == "too_many_streams"
    assert resp.headers["retry-after"] == "1"


def refusals() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("agentloop_limit_refusals_total",
                                     {"limit": "max_streams_per_user"}) or 0.0


async def test_an_end_users_streams_are_capped_at_every_door(app: Api) -> None:
    before = refusals()
    ann_token, bob_token = await token(app, "ann"), await token(app, "bob")
    async with (client(app, ann_token) as ann, client(app, bob_token) as bob,
                client(app, "key-t") as admin, AsyncExitStack() as stack):
        run = (await ann.post("/runs", json={"input": "hi", "agent": "helper"})).json()
        events = f"/runs/{run['id']}/events"
        for _ in range(LIMIT):
            assert (await opened(stack, ann, "GET", events)).status_code == 200
        too_many(await opened(stack, ann, "GET", events))
        # the toolkits' doors count the same streams, each answering in its own shape
        ai_sdk = await opened(stack, ann, "POST", "/ai-sdk/chat", json={
            "id": "c1", "agent": "helper", "messages": [
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]})
        too_many(ai_sdk)
        assert ai_sdk.headers["content-type"].startswith("text/plain")
        too_many(await opened(stack, ann, "POST", "/ag-ui", json={
            "threadId": "c2", "runId": "r1", "state": {}, "context": [], "tools": [],
            "messages": [{"id": "u1", "role": "user", "content": "hi"}],
            "forwardedProps": {"agentloop": {"agent": "helper"}}}))
        too_many(await opened(stack, ann, "POST", "/mcp", json={
            "jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"}))
        assert not (await ann.get("/threads")).json()["threads"]  # refused: nothing made
        # another user, and the tenant's own key, are not held back
        own = (await bob.post("/runs", json={"input": "hi", "agent": "helper"})).json()
        assert (await opened(stack, bob, "GET", f"/runs/{own['id']}/events")).status_code == 200
        for _ in range(LIMIT + 1):
            assert (await opened(stack, admin, "GET", events)).status_code == 200
        # a stream token for ann's run counts with ann's streams (no way round her limit);
        # one for the tenant's own run is the tenant's to hand out, and is not counted
        tenants = (await admin.post("/runs", json={"input": "hi"})).json()
        async with httpx.AsyncClient(base_url=app.url, timeout=10.0) as browser:
            too_many(await opened(stack, browser, "GET",
                                  f"{events}?token={run['stream_token']}"))
            for _ in range(LIMIT + 1):
                resp = await opened(stack, browser, "GET", f"/runs/{tenants['id']}/events"
                                    f"?token={tenants['stream_token']}")
                assert resp.status_code == 200
    # every stream above is closed: ann's room comes back as the server sees them go
    async with client(app, ann_token) as ann, AsyncExitStack() as stack:
        deadline = time.monotonic() + 20
        while True:
            resp = await opened(stack, ann, "GET", events)
            if resp.status_code == 200:
                break
            assert resp.status_code == 429 and time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert (await opened(stack, ann, "GET", events)).status_code == 200
        too_many(await opened(stack, ann, "GET", events))
    assert refusals() - before >= 6  # each refusal above is counted for operators
