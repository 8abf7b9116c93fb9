"""``/agents``: the tenant's agents (``app.api.agents``), for its API key only.

``POST /agents`` defines one (``201``; ``409`` when the name is taken, the agents file's
included), ``PUT /agents/{name}`` makes a new version (``201`` when it defines the agent),
``DELETE`` drops it with its versions; ``GET /agents`` lists the file's agents and the
tenant's, ``GET /agents/{name}/versions`` every version. A definition is checked as a run's
options are (model, tools, approval names, client tools, timeout): the same 4xx. The file's
agents are read-only here (``409 agent_read_only``).
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.agents import AgentSpec, ResolvedAgent, agent_not_found
from app.api.errors import ApiError, documented
from app.api.pipeline import check_run_options
from app.api.routes.deps import AdminDep, ServicesDep
from app.api.routes.strict_json import StrictJsonRoute
from app.api.run_view import rfc3339
from app.api.schemas import Agent, AgentList
from app.api.services import Services
from app.store.errors import AgentExists

router = APIRouter(tags=["agents"], route_class=StrictJsonRoute)


def agent_object(agent: ResolvedAgent) -> Agent:
    """The API view of an agent version."""
    return Agent(name=agent.spec.name, description=agent.spec.description,
                 version=agent.version, source=agent.source,
                 created_at=rfc3339(agent.created_at), definition=agent.spec.definition())


def _check(svc: Services, spec: AgentSpec, tenant: str) -> None:
    if spec.name in svc.agents.file_agents:
        raise ApiError(409, "agent_read_only", f"agent {spec.name!r} is defined in "
                       "AGENTLOOP_AGENTS_FILE", "name")
    check_run_options(svc, spec)


@router.post("/agents", status_code=201, response_model=Agent, operation_id="createAgent",
             responses=documented(400, 401, 403, 409, 413, 415, 422, 503))
async def create_agent(body: AgentSpec, response: Response, svc: ServicesDep,
                       who: AdminDep) -> Agent:
    """Define an agent (its version 1)."""
    _check(svc, body, who.tenant)
    try:
        record = await svc.agents.store.put_agent(who.tenant, body.name, body.definition(),
                                                  create=True)
    except AgentExists as exc:
        raise ApiError(409, "agent_exists", f"agent {body.name!r} exists: PUT "
                       f"/agents/{body.name} makes a new version", "name") from exc
    response.headers["Location"] = f"/agents/{body.name}"
    return agent_object(ResolvedAgent(body, record.version, "api", record.created_at))


@router.get("/agents", response_model=AgentList, operation_id="listAgents",
            responses=documented(401, 403, 503))
async def list_agents(svc: ServicesDep, who: AdminDep) -> AgentList:
    """The agents of the file and of the tenant, their latest versions."""
    return AgentList(agents=[agent_object(a) for a in await svc.agents.all(who.tenant)])


@router.get("/agents/{name}", response_model=Agent, operation_id="getAgent",
            responses=documented(401, 403, 404, 503))
async def get_agent(name: str, svc: ServicesDep, who: AdminDep) -> Agent:
    """The agent's latest version."""
    agent = await svc.agents.get(who.tenant, name)
    if agent is None:
        raise agent_not_found(name, None)
    return agent_object(agent)


@router.put("/agents/{name}", response_model=Agent, operation_id="putAgent",
            responses={201: {"model": Agent, "description": "the agent's first version"},
                       **documented(400, 401, 403, 409, 413, 415, 422, 503)})
async def put_agent(name: str, body: AgentSpec, response: Response, svc: ServicesDep,
                    who: AdminDep) -> Agent:
    """A new version of the agent (its first when it had none)."""
    if body.name != name:
        raise ApiError(422, "validation_error", "name: differs from the agent in the path",
                       "name")
    _check(svc, body, who.tenant)
    record = await svc.agents.store.put_agent(who.tenant, name, body.definition(), create=False)
    if record.version == 1:
        response.status_code = 201
        response.headers["Location"] = f"/agents/{name}"
    return agent_object(ResolvedAgent(body, record.version, "api", record.created_at))


@router.delete("/agents/{name}", status_code=204, operation_id="deleteAgent",
               responses=documented(401, 403, 404, 409, 503))
async def delete_agent(name: str, svc: ServicesDep, who: AdminDep) -> Response:
    """Drop the agent and its versions (runs it started keep its name and version)."""
    if name in svc.agents.file_agents:
        raise ApiError(409, "agent_read_only", f"agent {name!r} is defined in "
                       "AGENTLOOP_AGENTS_FILE")
    if not await svc.agents.store.delete_agent(who.tenant, name):
        raise agent_not_found(name, None)
    return Response(status_code=204)


@router.get("/agents/{name}/versions", response_model=AgentList,
            operation_id="listAgentVersions", responses=documented(401, 403, 404, 503))
async def agent_versions(name: str, svc: ServicesDep, who: AdminDep) -> AgentList:
    """Every version of the agent, oldest first."""
    if name in svc.agents.file_agents:
        file_agent = await svc.agents.get(who.tenant, name)
        assert file_agent is not None
        return AgentList(agents=[agent_object(file_agent)])
    records = await svc.agents.store.agent_versions(who.tenant, name)
    if not records:
        raise agent_not_found(name, None)
    return AgentList(agents=[agent_object(ResolvedAgent(
        AgentSpec.model_validate(r.definition), r.version, "api", r.created_at))
        for r in records])
