"""Request dependencies shared by the endpoint modules: the services and the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.auth import Principal
from app.api.errors import ApiError
from app.api.rate import check_rate
from app.api.services import Services
from app.delivery.stream_holds import HOLDER


# async (though they never await) so FastAPI calls them inline: a plain ``def`` dependency
# is run in the thread pool, one thread hop per request (measured: most of a request's cost)
async def get_services(request: Request) -> Services:
    """The process's services (set by the lifespan)."""
    services: Services = request.app.state.services
    return services


async def caller(svc: Services, request: Request, *,
                 stream_run_id: str | None = None) -> Principal:
    """Who is calling (an API key, an end user's token; ``stream_run_id``: a stream token for
    that run or thread too), within its rate."""
    who = await svc.auth.authenticate(request, stream_run_id=stream_run_id)
    await check_rate(svc, who)
    setattr(request.state, HOLDER, who.stream_holder())  # its streams are counted
    return who


async def get_principal(request: Request) -> Principal:
    """The authenticated caller (an API key or an end user; stream tokens are for the events
    routes)."""
    return await caller(request.app.state.services, request)


async def get_admin(request: Request) -> Principal:
    """The tenant's API key: 403 for an end user (agents and client tokens are the app's)."""
    who = await get_principal(request)
    if who.end_user:
        raise ApiError(403, "forbidden", "an end user's token cannot do this: it needs the "
                       "tenant's API key")
    return who


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]
