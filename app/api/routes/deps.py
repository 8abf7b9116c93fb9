"""Request dependencies shared by the endpoint modules: the services and the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.auth import Principal
from app.api.services import Services


# async (though they never await) so FastAPI calls them inline: a plain ``def`` dependency
# is run in the thread pool, one thread hop per request (measured: most of a request's cost)
async def get_services(request: Request) -> Services:
    """The process's services (set by the lifespan)."""
    services: Services = request.app.state.services
    return services


async def get_principal(request: Request) -> Principal:
    """The authenticated caller (API key only; stream tokens are for the events route)."""
    services: Services = request.app.state.services
    return services.auth.authenticate(request)


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
