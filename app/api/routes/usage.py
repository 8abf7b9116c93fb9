"""``GET /usage``: the tenant's token usage (``app.api.usage``), for its API key only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.errors import documented
from app.api.routes.deps import AdminDep, ServicesDep
from app.api.usage import UsageReport, check_group, days_between, report

router = APIRouter(tags=["usage"])


@router.get("/usage", response_model=UsageReport, operation_id="getUsage",
            responses=documented(401, 403, 422, 503))
async def get_usage(svc: ServicesDep, who: AdminDep,
                    group_by: Annotated[str, Query(description=(
                        "model, agent, subject or day"))] = "day",
                    start: Annotated[str | None, Query(alias="from", description=(
                        "first UTC day (YYYY-MM-DD); default: 29 days before to"))] = None,
                    end: Annotated[str | None, Query(alias="to", description=(
                        "last UTC day (YYYY-MM-DD), included; default: today"))] = None,
                    ) -> UsageReport:
    """Tokens and runs of the tenant's runs that ended from ``from`` to ``to``, grouped."""
    group = check_group(group_by)
    days = days_between(start, end)
    return report(await svc.backend.usage(who.tenant, days), group)
