"""``POST /client_tokens``: the app's backend, with its API key, mints a token for one of its
end users (``app.api.auth.client_tokens``), so the page talks to agentloop directly without
holding the key: it may start the agents it is granted and see, stream, steer, follow up,
cancel and answer its own runs and threads only."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.agents import agent_not_found
from app.api.checks import invalid
from app.api.errors import documented
from app.api.routes.deps import AdminDep, ServicesDep
from app.api.routes.strict_json import StrictJsonRoute
from app.api.run_view import rfc3339
from app.api.schemas import ClientToken, ClientTokenIn
from app.store.ids import is_thread_id

router = APIRouter(tags=["client_tokens"], route_class=StrictJsonRoute)


@router.post("/client_tokens", status_code=201, response_model=ClientToken,
             operation_id="createClientToken",
             responses=documented(400, 401, 403, 404, 413, 415, 422, 503))
async def create_client_token(body: ClientTokenIn, svc: ServicesDep,
                              who: AdminDep) -> ClientToken:
    """A token for the end user ``subject`` (see the module docstring)."""
    for i, name in enumerate(body.agents or []):
        if await svc.agents.get(who.tenant, name) is None:
            raise agent_not_found(name, f"agents[{i}]")
    for i, thread_id in enumerate(body.threads or []):
        if not is_thread_id(thread_id):
            raise invalid(f"threads[{i}]", "not a thread id")
    token, expires = svc.auth.client_tokens.mint(
        tenant=who.tenant, subject=body.subject, agents=body.agents, threads=body.threads,
        ttl=body.ttl)
    expires_at = rfc3339(expires)
    assert expires_at is not None
    return ClientToken(token=token, expires_at=expires_at, subject=body.subject,
                       agents=body.agents, threads=body.threads)
