"""An MCP server's tools in a registry: named ``<server>__<tool>``, in toolset
``mcp:<server>``, gated like any tool, replaced when the server's list changes and gone with
the servers."""

from __future__ import annotations

from mcp import types

from tool_registry import Registry, build_menu
from tool_registry.mcp import McpServerConfig, McpServers, McpTool, tool_name


def listing(*names: str) -> list[types.Tool]:
    return [types.Tool(name=n, description=f"the {n} tool",
                       inputSchema={"type": "object", "properties": {"q": {"type": "string"}}})
            for n in names]


def declared(registry: Registry, **config: object) -> McpServers:
    return McpServers({"srv": McpServerConfig(name="srv", url="https://x/mcp", **config)},
                      registry, env={})


async def test_tools_join_the_toolset_and_are_gated_like_any_other() -> None:
    registry = Registry()
    servers = declared(registry, approval=["write"])
    servers._sync(servers.connections["srv"].config, listing("read", "write", "a.b/c"))
    assert sorted(registry.expand("mcp:srv")) == ["srv__a_b_c", "srv__read", "srv__write"]
    assert sorted(build_menu(toolset="mcp:srv", registry=registry, env={},
                             disabled=["srv__write"]).tools) == ["srv__a_b_c", "srv__read"]
    assert build_menu(toolset="mcp:srv", registry=registry, env={}, disabled=["mcp:srv"]
                      ).tools == {}
    assert sorted(build_menu(tools=["srv__read"], registry=registry, env={}).tools) == [
        "srv__read"]
    write = registry.tools["srv__write"]
    assert isinstance(write, McpTool) and write.options.approval is True
    assert registry.tools["srv__read"].options.approval is False
    assert (write.remote_name, write.server, write.options.timeout) == ("write", "srv", 30.0)


async def test_a_new_listing_replaces_the_old_and_closing_forgets_them() -> None:
    registry = Registry()
    servers = declared(registry)
    config = servers.connections["srv"].config
    servers._sync(config, listing("one", "two"))
    menu = build_menu(toolset="mcp:srv", registry=registry, env={})
    servers._sync(config, listing("two", "three"))
    assert sorted(registry.expand("mcp:srv")) == ["srv__three", "srv__two"]
    assert sorted(menu.tools) == ["srv__one", "srv__two"]  # a menu keeps what it was built with
    await servers.close()
    assert not registry.has_toolset("mcp:srv") and registry.tools == {}


async def test_a_name_taken_twice_keeps_the_first() -> None:
    registry = Registry()
    servers = declared(registry)
    servers._sync(servers.connections["srv"].config, listing("a.b", "a_b"))
    assert [t.remote_name for t in registry.tools.values()] == ["a.b"]  # type: ignore[union-attr]


def test_names_providers_take() -> None:
    assert tool_name("gh", "issues.search") == "gh__issues_search"
    assert len(tool_name("s", "x" * 100)) == 64
