"""MCP servers' tools in runs, on both backends: each transport, argument checks, server
errors, content mapping, progress, timeouts, cancel, approvals, deferral, a changing tool
list and a server that dies mid-call and comes back."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal

import pytest

from app import runtime
from providers.fake import text, tool_calls
from tests.mcp.conftest import Client, text_of
from tool_registry import function
from tool_registry.mcp import McpConnection, McpServerConfig

_ids = itertools.count()


def key() -> str:
    return f"k{next(_ids)}"


@function(toolsets=["mcp_testing"])
async def mcp_nested_add() -> str:
    """Adds in a nested loop through an MCP server's tool (test tool)."""
    result = await runtime.exec("add 2 and 2", tools=["web__add"])
    return result.text or ""


async def test_tools_listed_with_their_toolsets(mcp: Client) -> None:
    resp = await mcp.http.get("/tools")
    tools = {t["name"]: t for t in resp.json()}
    assert tools["web__add"]["toolsets"] == ["mcp:web"]
    assert tools["web__add"]["parameters"]["required"] == ["a", "b"]
    assert {"legacy__add", "local__pid", "mortal__hang"} <= set(tools)
    assert "legacy__fail" not in tools  # allowed_tools
    assert tools["lazy__pid"]["deferred"] is True


@pytest.mark.parametrize("server", ["web", "legacy", "local"])
async def test_a_call_over_each_transport(mcp: Client, server: str) -> None:
    run = await mcp.run(tool_calls((f"{server}__add", {"a": 2, "b": 3})), text("ok"),
                        toolset=f"mcp:{server}")
    [end] = await mcp.ends(run["id"])
    assert (end["is_error"], text_of(end)) == (False, "5")
    assert (end["source"], end["server"]) == ("mcp", server)
    assert end["result"]["details"] == {"structured": {"result": 5}}
    start = next(e for e in await mcp.events(run["id"]) if e["type"] == "tool_execution_start")
    assert (start["source"], start["server"]) == ("mcp", server)
    names = [t.name for t in mcp.fake.requests[0].tools]
    assert f"{server}__add" in names and all(n.startswith(f"{server}__") for n in names)


async def test_headers_reach_the_server_with_their_variables_filled_in(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("web__whoami", {})), text("ok"), tools=["web__whoami"])
    [end] = await mcp.ends(run["id"])
    assert text_of(end) == "Bearer s3cret"


async def test_bad_arguments_never_reach_the_server(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("web__add", {"a": "two"})), text("ok"), tools=["web__add"])
    [end] = await mcp.ends(run["id"])
    assert end["is_error"] is True
    assert "a: expected integer" in text_of(end) and "b: field required" in text_of(end)


async def test_a_server_error_is_an_error_result(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("web__fail", {"why": "no disk"})), text("ok"),
                        tools=["web__fail"])
    [end] = await mcp.ends(run["id"])
    assert end["is_error"] is True and "no disk" in text_of(end)
    assert (await mcp.status(run["id"], "completed"))["status"] == "completed"


async def test_images_and_resource_links(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("web__picture", {}), ("web__link", {})), text("ok"),
                        tools=["web__picture", "web__link"])
    picture, link = await mcp.ends(run["id"])
    [image] = picture["result"]["content"]
    assert (image["type"], image["mime_type"]) == ("image", "image/png") and image["data"]
    assert text_of(link) == "[resource link] readme: file:///readme.md (text/markdown)"


async def test_progress_becomes_tool_execution_updates(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("web__slow", {"steps": 3})), text("ok"),
                        tools=["web__slow"])
    await mcp.ends(run["id"])
    updates = [e for e in await mcp.events(run["id"]) if e["type"] == "tool_execution_update"]
    assert [u["partial_result"] for u in updates] == [
        {"progress": float(i), "total": 3.0, "message": f"step {i}"} for i in (1, 2, 3)]
    assert {(u["source"], u["server"]) for u in updates} == {("mcp", "web")}


async def cancelled_at_server(mcp_url: str, k: str) -> bool:
    """Asks the server whether ``hang(k)`` was cancelled."""
    probe = McpConnection(McpServerConfig(name="probe", url=mcp_url), env={})
    try:
        result = await probe.call("cancelled", {"key": k})
    finally:
        await probe.close()
    return result.structuredContent == {"result": True}


async def test_a_timeout_is_an_error_result_and_cancels_the_call(mcp: Client,
                                                                  mcp_http) -> None:
    k = key()
    run = await mcp.run(tool_calls(("short__hang", {"key": k})), text("ok"),
                        tools=["short__hang"])
    [end] = await mcp.ends(run["id"])
    assert end["is_error"] is True and "timed out after 0.5 s" in text_of(end)
    assert await cancelled_at_server(f"{mcp_http.url}/mcp", k)


async def test_cancelling_the_run_cancels_the_call(mcp: Client, mcp_http) -> None:
    k = key()
    run = await mcp.run(tool_calls(("web__hang", {"key": k})), text("ok"), tools=["web__hang"])
    await mcp.until(run["id"], "tool_execution_update")  # the server runs it
    assert (await mcp.http.post(f"/runs/{run['id']}/cancel")).status_code in (200, 202)
    await mcp.status(run["id"], "cancelled")
    assert await cancelled_at_server(f"{mcp_http.url}/mcp", k)


async def test_approval_on_mcp_tools(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("guarded__add", {"a": 1, "b": 1}, "c1")), text("ok"),
                        toolset="mcp:guarded")
    await mcp.status(run["id"], "requires_action")
    resp = await mcp.http.post(f"/runs/{run['id']}/approvals",
                               json={"tool_call_id": "c1", "decision": "approve"})
    assert resp.status_code in (200, 202), resp.text
    [end] = await mcp.ends(run["id"])
    assert text_of(end) == "2"


async def test_deferred_tools_load_through_tool_search(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("tool_search", {"query": "lazy__pid"})),
                        tool_calls(("lazy__pid", {})), text("ok"), toolset="mcp:lazy")
    search, pid = await mcp.ends(run["id"])
    assert "lazy__pid" in text_of(search)
    assert pid["is_error"] is False and text_of(pid).isdigit()
    first, second, _ = mcp.fake.requests
    assert [t.name for t in first.tools] == ["tool_search"]
    assert "lazy__pid" in [t.name for t in second.tools]


async def test_a_changed_tool_list_is_picked_up_for_later_runs(mcp: Client) -> None:
    name = f"extra_{mcp.app.kind}"
    run = await mcp.run(tool_calls(("web__grow", {"name": name})), text("ok"),
                        tools=["web__grow"])
    await mcp.ends(run["id"])
    assert [t.name for t in mcp.fake.requests[1].tools] == ["web__grow"]  # its menu stays
    async with asyncio.timeout(30):  # until the notification's listing is in
        while f"web__{name}" not in {t["name"] for t in (await mcp.http.get("/tools")).json()}:
            await asyncio.sleep(0.02)
    run = await mcp.run(tool_calls((f"web__{name}", {})), text("ok"), tools=[f"web__{name}"])
    [end] = await mcp.ends(run["id"])
    assert text_of(end) == f"{name} here"


async def test_a_server_that_dies_mid_call_and_comes_back(mcp: Client, mortal) -> None:
    run = await mcp.run(tool_calls(("mortal__hang", {"key": key()})), text("ok"),
                        toolset="mcp:mortal")
    await mcp.until(run["id"], "tool_execution_update")
    mortal.kill()
    [end] = await mcp.ends(run["id"])
    assert end["is_error"] is True and "lost the connection to MCP server 'mortal'" in \
        text_of(end)
    assert (await mcp.status(run["id"], "completed"))["status"] == "completed"
    mortal.start()
    run = await mcp.run(tool_calls(("mortal__pid", {})), text("ok"), toolset="mcp:mortal")
    [end] = await mcp.ends(run["id"])
    assert end["is_error"] is False and int(text_of(end)) == mortal.proc.pid


async def test_runtime_exec_in_a_tool_body_calls_mcp_tools(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("mcp_nested_add", {})),
                        tool_calls(("web__add", {"a": 2, "b": 2})), text("four"), text("ok"),
                        tools=["mcp_nested_add"])
    nested, outer = await mcp.ends(run["id"])
    assert (nested["depth"], nested["server"], text_of(nested)) == (1, "web", "4")
    assert (outer["depth"], text_of(outer)) == (0, "four")


async def test_a_stdio_server_that_dies_mid_call_is_started_again(mcp: Client) -> None:
    run = await mcp.run(tool_calls(("local__pid", {})), text("ok"), toolset="mcp:local")
    [end] = await mcp.ends(run["id"])
    pid = int(text_of(end))
    run = await mcp.run(tool_calls(("local__hang", {"key": key()})), text("ok"),
                        toolset="mcp:local")
    await mcp.until(run["id"], "tool_execution_update")
    os.kill(pid, signal.SIGKILL)
    [end] = await mcp.ends(run["id"])
    assert end["is_error"] is True and "lost the connection to MCP server 'local'" in \
        text_of(end)
    run = await mcp.run(tool_calls(("local__pid", {})), text("ok"), toolset="mcp:local")
    [end] = await mcp.ends(run["id"])
    assert end["is_error"] is False and int(text_of(end)) not in (pid, 0)
