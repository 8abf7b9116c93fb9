"""@function schemas, wrapped tools, toolsets and each gating layer in order."""

from __future__ import annotations

from typing import Literal

import pytest

from providers.base import ToolSpec
from tool_registry import (
    ArgumentError,
    CancelSignal,
    MenuError,
    Registry,
    ToolContext,
    build_menu,
    function,
    import_tool_modules,
)


@function(register=False)
async def search(query: str, limit: int = 10, mode: Literal["fast", "deep"] = "fast",
                 ctx: ToolContext | None = None, cancel: CancelSignal | None = None) -> str:
    """Search the index.

    Longer explanation line.

    Args:
        query: what to look for,
            across two lines
        limit (int): how many hits
    Returns:
        hits
    """
    return query


def test_schema_from_hints_and_google_docstring() -> None:
    assert search.spec.name == "search"
    assert search.spec.description == "Search the index.\n\nLonger explanation line."
    params = search.spec.parameters
    assert params["required"] == ["query"]
    assert params["properties"]["query"] == {"type": "string",
                                             "description": "what to look for, across two lines"}
    assert params["properties"]["limit"]["description"] == "how many hits"
    assert params["properties"]["mode"]["enum"] == ["fast", "deep"]
    assert "ctx" not in params["properties"] and "cancel" not in params["properties"]
    assert search.validate({"query": "q", "limit": "30"}) == {"query": "q", "limit": 30,
                                                                "mode": "fast"}
    with pytest.raises(ArgumentError, match=r"mode: Input should be 'fast' or 'deep'"):
        search.validate({"query": "q", "mode": "slow"})


def test_dict_and_object_tools_validate_against_their_schema() -> None:
    reg = Registry()
    spec = {"name": "mul", "description": "Multiply",
            "parameters": {"type": "object", "required": ["a", "b"],
                           "properties": {"a": {"type": "integer"}, "b": {"type": "number"}}}}
    tool = reg.register({"spec": spec, "execute": lambda args: args["a"] * args["b"]})
    assert tool.validate({"a": "3", "b": "1.5"}) == {"a": 3, "b": 1.5}
    with pytest.raises(ArgumentError) as err:
        tool.validate({"a": "x"})
    assert "- a: expected integer" in str(err.value) and "- b: field required" in str(err.value)

    class Obj:
        spec = ToolSpec(name="obj", description="d", parameters={"type": "object"})

        async def execute(self, args: dict, ctx: ToolContext) -> str:  # type: ignore[type-arg]
            return ctx.run_id

    assert reg.register(Obj()).name == "obj"


def make_registry() -> Registry:
    reg = Registry()

    def tool(name: str, **opts: object) -> None:
        def body() -> str:
            return name
        body.__doc__ = f"{name} tool"
        body.__name__ = name
        reg.register(function(register=False, **opts)(body))  # type: ignore[call-overload]

    tool("hidden_at_start", available_if=lambda: False)
    tool("internal", expose=False)
    tool("read", toolsets=["files", "readonly"])
    tool("write", toolsets=["files"], unsafe_in=["web"])
    tool("shell", toolsets=["code"], unsafe_in=["web"], requires_env=["SHELL_OK"])
    tool("flaky", check_fn=lambda: False)
    tool("fetch", toolsets=["web"])
    tool("later", defer=True)
    reg.define_toolset("dev", ["files", "code"])
    return reg


def test_each_gating_layer_in_order() -> None:
    reg = make_registry()
    env = {"SHELL_OK": "1"}
    assert "hidden_at_start" in reg.skipped and "hidden_at_start" not in reg.tools  # 1
    full = build_menu(registry=reg, env=env)
    assert "internal" not in full.tools  # 2 expose
    assert sorted(build_menu(registry=reg, toolset="dev", env=env).tools) == [
        "read", "shell", "write"]  # 3 membership, toolsets including toolsets
    assert sorted(build_menu(registry=reg, toolset="dev", tools_source="web", env=env).tools) \
        == ["read"]  # 4 source channel
    assert "shell" not in build_menu(registry=reg, env={}).tools  # 5 requires_env
    assert "flaky" not in full.tools  # 5 check_fn
    menu = build_menu(registry=reg, tools_deny=["w*"], tools_allow=["*e*"], env=env)
    assert sorted(menu.tools) == ["fetch", "later", "read", "shell"]  # 6 deny then allow
    assert "read" not in build_menu(registry=reg, disabled=["readonly"], env=env).tools
    assert full.deferred == {"later"} and "later" not in full.names()  # 7 deferral
    assert build_menu(registry=reg, toolset="none").tools == {}


def test_unknown_names_raise_menu_errors_naming_the_field() -> None:
    reg = make_registry()
    with pytest.raises(MenuError) as err:
        build_menu(registry=reg, tools=["read", "nope"])
    assert err.value.field == "tools[1]"
    with pytest.raises(MenuError) as err:
        build_menu(registry=reg, toolset="nope")
    assert err.value.field == "toolset"


def test_tool_modules_join_the_default_registry(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_tools_mod.py").write_text(
        "from tool_registry import function\n\n"
        "@function\ndef shout(text: str) -> str:\n    '''Upper-case.'''\n    return text.upper()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_tool_modules(["my_tools_mod", " "]) == ["my_tools_mod"]
    from tool_registry import default_registry

    assert "shout" in default_registry.tools
