"""A run's own MCP servers (``mcp_servers``): refused unless the URL matches
``AGENTLOOP_MCP_ALLOW_URLS`` and passes the SSRF guard, on every door's pipeline; allowed
ones connected by the worker, their tools on the run's menu."""

from __future__ import annotations

import ipaddress

import pytest

from app.worker.run_servers import open_run_servers
from providers import safe_fetch
from providers.fake import text, tool_calls
from tests.mcp.conftest import Client, HttpServer, text_of
from tool_registry import Menu


def server(url: str, **extra: object) -> dict[str, object]:
    return {"name": "mine", "url": url, **extra}


async def refused(mcp: Client, status: int, *entries: dict[str, object]) -> dict[str, object]:
    resp = await mcp.http.post("/runs", json={"input": "go", "mcp_servers": list(entries)})
    assert resp.status_code == status, resp.text
    return resp.json()["error"]  # type: ignore[no-any-return]


async def test_a_url_no_pattern_allows_is_refused(mcp: Client) -> None:
    error = await refused(mcp, 403, server("http://10.0.0.5:8080/mcp"))
    assert (error["code"], error["field"]) == ("mcp_server_not_allowed", "mcp_servers[0].url")
    assert "AGENTLOOP_MCP_ALLOW_URLS" in error["message"]


async def test_an_allowed_url_at_a_loopback_address_is_refused(mcp: Client,
                                                               mcp_http: HttpServer) -> None:
    error = await refused(mcp, 403, server(f"{mcp_http.url}/mcp"))
    assert error["field"] == "mcp_servers[0].url" and "loopback" in error["message"]


async def test_names_and_shapes(mcp: Client) -> None:
    error = await refused(mcp, 400, server("https://mcp.example.com/x", name="web"))
    assert (error["code"], error["field"]) == ("invalid_mcp_server", "mcp_servers[0].name")
    error = await refused(mcp, 422, server("https://mcp.example.com/x", command=["sh"]))
    assert error["field"] == "mcp_servers[0].command"
    error = await refused(mcp, 422, server("https://mcp.example.com/x", name="a b"))
    assert error["field"] == "mcp_servers[0].name"


async def test_the_same_check_on_the_ai_sdk_door(mcp: Client) -> None:
    resp = await mcp.http.post("/ai-sdk/chat", json={
        "id": "chat1", "messages": [{"id": "m1", "role": "user",
                                     "parts": [{"type": "text", "text": "hi"}]}],
        "mcp_servers": [server("http://10.0.0.5/mcp")]})
    assert resp.status_code == 403, resp.text
    assert resp.headers["x-agentloop-error-field"] == "mcp_servers[0].url"


@pytest.fixture
def loopback_is_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SSRF guard takes 127.0.0.1 for a public address (the test server stands in)."""
    real = safe_fetch.forbidden_reason

    def reason(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, allow: bool) -> str | None:
        return None if str(ip) == "127.0.0.1" else real(ip, allow)

    monkeypatch.setattr(safe_fetch, "forbidden_reason", reason)


@pytest.mark.usefixtures("loopback_is_public")
async def test_an_allowed_server_lends_the_run_its_tools(mcp: Client,
                                                        mcp_http: HttpServer) -> None:
    entry = server(f"{mcp_http.url}/mcp", headers={"Authorization": "Bearer ${MCP_TEST_TOKEN}"})
    run = await mcp.run(tool_calls(("mine__whoami", {}), ("mine__add", {"a": 1, "b": 2})),
                        text("ok"), mcp_servers=[entry], tools=[], tools_deny=["mine__hang"])
    whoami, add = await mcp.ends(run["id"])
    assert text_of(whoami) == "Bearer ${MCP_TEST_TOKEN}"  # literal: no process variables
    assert (add["source"], add["server"], text_of(add)) == ("mcp", "mine", "3")
    names = [t.name for t in mcp.fake.requests[0].tools]
    assert "mine__add" in names and "mine__hang" not in names


async def test_the_worker_checks_the_address_again(mcp_http: HttpServer,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A name may resolve elsewhere by the time a worker connects: refused there too, the
    server's tools stay off the menu and the run goes on."""
    menu = Menu()
    request = {"mcp_servers": [server(f"{mcp_http.url}/mcp")]}
    servers = await open_run_servers(request, menu, allow_private=False, disabled=())
    assert servers.connections == [] and menu.tools == {}
    assert "loopback" in caplog.text


@pytest.mark.parametrize(("headers", "field"), [
    ({"x-token": "a\r\nx-injected: 1"}, "mcp_servers[0].headers.x-token"),
    ({"x-token": "bearer ü"}, "mcp_servers[0].headers.x-token"),
    ({"bad name": "v"}, "mcp_servers[0].headers.bad name"),
])
async def test_headers_that_http_cannot_carry_are_refused_at_the_door(
        mcp: Client, headers: dict[str, str], field: str) -> None:
    """A header the worker could not send (a line break, a non-ASCII value, a name that is no
    token) is a 422 naming it when the run is asked for, not a run that fails at connect."""
    error = await refused(mcp, 422, server("https://mcp.example.com/x", headers=headers))
    assert error["field"] == field, error
