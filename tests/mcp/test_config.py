"""Declaring MCP servers: AGENTLOOP_MCP_SERVERS and the agents file, errors naming the server
and field, ${VAR} in header values (never shown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import Settings
from app.process.setup import mcp_configs
from tool_registry.mcp import McpConfigError, McpServerConfig, expand, parse_servers


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_a_declaration_and_its_defaults() -> None:
    [web] = parse_servers({"web": {"url": "https://x/mcp"}}).values()
    assert (web.kind, web.timeout, web.approval, web.allowed_tools) == (
        "streamable_http", 30.0, "never", None)
    [local] = parse_servers({"local": {"command": ["srv", "--stdio"]}}).values()
    assert local.kind == "stdio"


@pytest.mark.parametrize(("raw", "message"), [
    ({"a": {"transport": "sse"}}, "a.(server): Value error, a sse server needs a url"),
    ({"a": {"url": "https://x", "timeout": 0}}, "a.timeout: Input should be greater than 0"),
    ({"a": {"url": "https://x", "approval": "sometimes"}}, "a.approval"),
    ({"a b": {"url": "https://x"}}, "a b.name: String should match pattern"),
    ({"a": {"url": "https://x", "colour": 1}}, "a.colour: Extra inputs are not permitted"),
])
def test_errors_name_the_server_and_field(raw: dict[str, object], message: str) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_servers(raw)
    assert str(caught.value).startswith(message)


def test_header_variables_are_filled_in_and_never_shown() -> None:
    config = McpServerConfig(name="a", url="https://x", headers={"Authorization":
                                                                 "Bearer ${TOKEN}"})
    assert expand(config.headers, {"TOKEN": "t0p"}) == {"Authorization": "Bearer t0p"}
    assert "TOKEN" not in repr(config) and "Bearer" not in repr(config)
    with pytest.raises(McpConfigError, match=r"\$\{TOKEN\} is not set"):
        expand(config.headers, {})


def test_servers_from_the_environment_and_the_agents_file(tmp_path: Path) -> None:
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents: []\nmcp_servers:\n  files:\n    command: [fs-server]\n")
    found = mcp_configs(settings(mcp_servers='{"web": {"url": "https://x/mcp"}}',
                                 agents_file=agents))
    assert sorted(found) == ["files", "web"]
    with pytest.raises(SystemExit, match="files: declared in AGENTLOOP_MCP_SERVERS too"):
        mcp_configs(settings(mcp_servers='{"files": {"url": "https://x/mcp"}}',
                             agents_file=agents))
    with pytest.raises(SystemExit, match=r"AGENTLOOP_MCP_SERVERS: mcp_servers: web\.url"):
        mcp_configs(settings(mcp_servers='{"web": {"url": 5}}'))


def test_the_setting_must_be_a_json_object() -> None:
    with pytest.raises(ValueError, match="AGENTLOOP_MCP_SERVERS must be a JSON object"):
        settings(mcp_servers="[1]")


def test_approval_always_never_or_names() -> None:
    def server(approval: object) -> McpServerConfig:
        return McpServerConfig(name="a", url="https://x", approval=approval)  # type: ignore[arg-type]

    assert server("always").needs_approval("read") is True
    assert server("never").needs_approval("write") is False
    assert [server(["write"]).needs_approval(t) for t in ("read", "write")] == [False, True]
