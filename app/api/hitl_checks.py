"""``POST /runs`` fields of human-in-the-loop, checked at create time (each failure names its
field): ``approval`` names known tools or toolsets (400 ``unknown_tool``), ``client_tools``
have unique names that no server tool on the menu has (400 ``invalid_client_tool``) and object
schemas (422)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.api.errors import ApiError
from app.api.schemas import CreateRun
from tool_registry import MenuError, Registry, build_menu


def check_hitl(body: CreateRun, *, registry: Registry, disabled: Iterable[str],
               env: Mapping[str, str]) -> None:
    """Refuse a body whose approval or client-tool fields cannot work."""
    if isinstance(body.approval, list):
        for i, name in enumerate(body.approval):
            if name not in registry.tools and not registry.has_toolset(name):
                raise ApiError(400, "unknown_tool", f"approval names {name!r}, which is no "
                               "tool or toolset", f"approval[{i}]")
    if body.client_tools:
        _check_client_tools(body, registry, disabled, env)


def _check_client_tools(body: CreateRun, registry: Registry, disabled: Iterable[str],
                        env: Mapping[str, str]) -> None:
    try:
        menu = build_menu(tools=body.tools, toolset=body.toolset, tools_source=body.tools_source,
                          tools_allow=body.tools_allow, tools_deny=body.tools_deny,
                          disabled=disabled, registry=registry, env=env)
    except MenuError:
        return  # check_tools reports it
    seen: set[str] = set()
    for i, tool in enumerate(body.client_tools or []):
        field = f"client_tools[{i}]"
        if tool.name in menu.tools or tool.name in seen:
            raise ApiError(400, "invalid_client_tool", f"client tool {tool.name!r}: the name "
                           "is already on this run's menu", f"{field}.name")
        seen.add(tool.name)
        if tool.parameters.get("type", "object") != "object":
            raise ApiError(422, "validation_error", f"{field}.parameters: must be an object "
                           "schema (type 'object')", f"{field}.parameters")
