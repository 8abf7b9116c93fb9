"""``/mcp`` driven by the official SDK's client: the ``run`` tool (no agents), an agent as a
tool, progress notifications, refusals as error results, and the API's auth."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from providers.fake import hanging, text, tool_calls
from tests.api.conftest import serve
from tests.mcp.conftest import Client


@asynccontextmanager
async def session(base: str, headers: dict[str, str] | None = None
                  ) -> AsyncIterator[ClientSession]:
    async with (httpx.AsyncClient(headers=headers, timeout=30) as http,
                streamable_http_client(f"{base}/mcp", http_client=http) as (read, write, _),
                ClientSession(read, write) as client):
        await client.initialize()
        yield client


async def test_a_run_through_the_run_tool_with_progress(mcp: Client) -> None:
    mcp.fake.script = [tool_calls(("web__add", {"a": 1, "b": 2})), text("three")]
    mcp.fake.calls = 0
    seen: list[Any] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, message))

    async with session(mcp.app.server.url) as client:
        [tool] = (await client.list_tools()).tools
        assert tool.name == "run" and tool.inputSchema["required"] == ["input"]
        result = await client.call_tool("run", {"input": "add", "toolset": "mcp:web"},
                                        progress_callback=progress)
    assert result.isError is False
    assert result.content[0].text == "three"  # type: ignore[union-attr]
    summary = result.structuredContent
    assert summary is not None and summary["status"] == "completed"
    run = (await mcp.http.get(f"/runs/{summary['run_id']}")).json()
    assert run["result"] == "three"
    assert seen == [(1.0, f"run {summary['run_id']} started"), (2.0, "calling web__add")]


async def test_a_refused_run_is_an_error_result(mcp: Client) -> None:
    async with session(mcp.app.server.url) as client:
        unknown = await client.call_tool("run", {"input": "x", "toolset": "nope"})
        bad = await client.call_tool("run", {"input": "x", "temperature": -1})
        missing = await client.call_tool("run", {})
    assert unknown.isError and "unknown toolset 'nope'" in unknown.content[0].text  # type: ignore[union-attr]
    assert bad.isError and bad.content[0].text.startswith("temperature:")  # type: ignore[union-attr]
    assert missing.isError and "input" in missing.content[0].text  # type: ignore[union-attr]


async def test_a_client_that_hangs_up_cancels_the_run(mcp: Client) -> None:
    mcp.fake.script = [hanging("thinking")]
    mcp.fake.calls = 0

    async def call() -> None:
        async with session(mcp.app.server.url) as client:
            await client.call_tool("run", {"input": "think"})

    task = asyncio.create_task(call())
    async with asyncio.timeout(30):  # until the model is thinking
        while mcp.fake.calls == 0:
            await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [run] = (await mcp.http.get("/runs", params={"limit": 1})).json()["runs"]
    assert (await mcp.status(run["id"], "cancelled"))["stop_reason"] == "aborted"


@pytest.fixture
async def keyed() -> AsyncIterator[Any]:
    async with serve(api_keys="k-one:acme") as api:
        yield api


async def test_a_cancelled_notification_alone_leaves_the_run_going(mcp: Client) -> None:
    """Streamable HTTP cancels by closing the request's stream (the hang-up test above); a
    ``notifications/cancelled`` from a client of an older revision is accepted and ignored:
    on a stateless endpoint it cannot name a call, so it must not cancel anything."""
    mcp.fake.script = [text("done", delay=1.0)]  # five events a second apart
    mcp.fake.calls = 0

    async def call() -> Any:
        async with session(mcp.app.server.url) as client:
            return await client.call_tool("run", {"input": "wait"})

    task = asyncio.create_task(call())
    async with asyncio.timeout(30):  # until the model is called (its reply ends 5 s later)
        while mcp.fake.calls == 0:
            await asyncio.sleep(0.02)
    [run] = (await mcp.http.get("/runs", params={"limit": 1})).json()["runs"]
    sent = await mcp.http.post(
        "/mcp", json={"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 1, "reason": "the user stopped it"}},
        headers={"accept": "application/json, text/event-stream"})
    assert sent.status_code == 202, sent.text
    assert (await mcp.http.get(f"/runs/{run['id']}")).json()["status"] == "running"
    result = await asyncio.wait_for(task, 30)
    assert result.isError is False and result.structuredContent["status"] == "completed"
    assert result.structuredContent["run_id"] == run["id"]


async def run_ids(mcp: Client) -> list[str]:
    """The ids of the tenant's runs (their states and stream tokens change as time goes)."""
    return [r["id"] for r in (await mcp.http.get("/runs", params={"limit": 100})).json()["runs"]]


async def test_a_body_the_other_doors_refuse_is_a_json_rpc_error(mcp: Client) -> None:
    """``/mcp`` reads a body as every door does: what the REST doors answer 400/422 for is a
    400 JSON-RPC error here, before the SDK (whose ``json.loads`` took these: a 500 for deep
    nesting, a run failing to be stored for a lone surrogate, a reply that could not be
    encoded for a surrogate id), and no run starts."""
    mcp.fake.script, mcp.fake.calls = [text("never")], 0
    before = await run_ids(mcp)
    call = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run","arguments":'
    deep = '{"a":' * 70 + '1' + '}' * 70
    cases = [
        (call + '{"input":"hi \\ud800"}}}', -32700, "Parse error: "),
        ('{"jsonrpc":"2.0","id":"\\ud800","method":"tools/list"}', -32700, "Parse error: "),
        ('{"jsonrpc":"2.0","id":NaN,"method":"tools/list"}', -32700, "Parse error: "),
        ('{"a":' * 3000 + '1' + '}' * 3000, -32700, "Parse error: "),  # past orjson's 1024
        (call + deep + '}}', -32600,
         "Invalid request: params.arguments.a.a: nested deeper than 64 levels"),
        ("", -32700, "Parse error: "),
    ]
    accept = {"accept": "application/json, text/event-stream",
              "content-type": "application/json"}
    for body, code, message in cases:
        resp = await mcp.http.post("/mcp", content=body.encode(), headers=accept)
        assert resp.status_code == 400, (body[:80], resp.text)
        error = resp.json()
        assert error["jsonrpc"] == "2.0" and error["id"] == "server-error", error
        assert error["error"]["code"] == code and error["error"]["message"].startswith(message)
    assert mcp.fake.calls == 0
    assert await run_ids(mcp) == before  # no run started (another test's may still be ending)
    mcp.fake.script = [text("fine")]  # the door still serves a good body, read once more
    async with session(mcp.app.server.url) as client:
        result = await client.call_tool("run", {"input": "\u00e9t\u00e9 \U0001f600"})
    assert result.isError is False and result.content[0].text == "fine"  # type: ignore[union-attr]


async def test_the_api_key_is_required_and_agents_are_the_tools(keyed: Any) -> None:
    resp = await keyed.client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert resp.status_code == 401
    auth = {"Authorization": "Bearer k-one"}
    created = await keyed.client.post("/agents", headers=auth, json={
        "name": "helper", "description": "helps", "system": "be brief"})
    assert created.status_code in (200, 201), created.text
    keyed.fake.script = [text("done")]
    async with session(keyed.url, auth) as client:
        [tool] = (await client.list_tools()).tools
        assert (tool.name, tool.description) == ("helper", "helps")
        result = await client.call_tool("helper", {"input": "hi"})
    assert result.content[0].text == "done"  # type: ignore[union-attr]
    summary = result.structuredContent
    assert summary is not None
    run = (await keyed.client.get(f"/runs/{summary['run_id']}", headers=auth)).json()
    assert run["agent"] == "helper"
    for name in ("other", "third"):
        await keyed.client.post("/agents", headers=auth, json={"name": name})
    minted = await keyed.client.post("/client_tokens", headers=auth,
                                     json={"subject": "ann", "agents": ["helper", "third"]})
    assert minted.status_code == 201, minted.text
    user = {"Authorization": f"Bearer {minted.json()['token']}"}
    keyed.fake.script, keyed.fake.calls = [text("for ann")], 0
    async with session(keyed.url, user) as client:  # an end user: the agents it is granted
        assert sorted(t.name for t in (await client.list_tools()).tools) == ["helper", "third"]
        refused = await client.call_tool("other", {"input": "hi"})
        result = await client.call_tool("helper", {"input": "hi"})
    assert refused.isError and result.content[0].text == "for ann"  # type: ignore[union-attr]


async def test_an_agents_tool_checks_what_else_it_is_given_as_every_door_does(keyed: Any
                                                                          ) -> None:
    """An agent's tool takes ``input``; an option beside it meets the agent's field locks
    (as ``POST /runs`` with ``agent`` does), an unknown one is refused: never dropped."""
    auth = {"Authorization": "Bearer k-one"}
    created = await keyed.client.post("/agents", headers=auth, json={
        "name": "locked", "system": "be brief", "overridable": ["temperature"]})
    assert created.status_code in (200, 201), created.text
    keyed.fake.script, keyed.fake.calls = [text("warm")], 0
    async with session(keyed.url, auth) as client:
        model = await client.call_tool("locked", {"input": "hi", "model": "fake:other"})
        unknown = await client.call_tool("locked", {"input": "hi", "bogus": 1})
        allowed = await client.call_tool("locked", {"input": "hi", "temperature": 0.5})
    assert model.isError and model.content[0].text.startswith(  # type: ignore[union-attr]
        "model: agent 'locked' does not let a request set this")
    assert unknown.isError and unknown.content[0].text.startswith("bogus:")  # type: ignore[union-attr]
    assert keyed.fake.calls == 1  # the refused calls started nothing
    assert allowed.isError is False and allowed.content[0].text == "warm"  # type: ignore[union-attr]
    summary = allowed.structuredContent
    assert summary is not None
    run = (await keyed.client.get(f"/runs/{summary['run_id']}", headers=auth)).json()
    assert run["agent"] == "locked"
    assert keyed.fake.requests[-1].temperature == 0.5


async def test_get_and_delete_are_405_not_an_idle_stream(mcp: Client) -> None:
    """Stateless: the server sends nothing of its own and has no session, so a GET (which
    would hold an empty event stream open for as long as the client likes) and a DELETE
    are refused at once, as the specification provides, and POST keeps working."""
    headers = {"Accept": "text/event-stream, application/json"}
    async with httpx.AsyncClient(base_url=mcp.app.server.url, timeout=5) as http:
        for method in ("GET", "DELETE"):
            resp = await http.request(method, "/mcp", headers=headers)
            assert resp.status_code == 405, resp.text
            assert resp.headers["allow"] == "POST"
            assert resp.json()["error"]["code"] == "method_not_allowed"
    async with session(mcp.app.server.url) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["run"]
