"""``GET /tools``: what a caller may put on a run's menu."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.errors import documented
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.schemas import ToolInfo
from tool_registry import build_menu

router = APIRouter(tags=["tools"])


@router.get("/tools", response_model=list[ToolInfo], operation_id="listTools",
            responses=documented(401))
async def list_tools(svc: ServicesDep, who: PrincipalDep) -> list[ToolInfo]:
    """Every tool the full menu offers (deferred ones included), with its toolsets."""
    menu = build_menu(toolset="full", disabled=svc.settings.disabled_tool_list(),
                      registry=svc.registry, env=svc.env)
    return [ToolInfo(name=name, description=tool.spec.description,
                     parameters=dict(tool.spec.parameters),
                     toolsets=[t for t in svc.registry.toolsets_of(name) if t != "full"],
                     deferred=name in menu.deferred)
            for name, tool in sorted(menu.tools.items())]
