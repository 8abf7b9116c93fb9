"""``/runs``: create, read, list and cancel runs.

Every Run these routes return carries a fresh ``stream_token`` for its events (read-only, scoped
to that run and tenant, ``AGENTLOOP_STREAM_TOKEN_TTL`` s): a page renews an expired token, or
subscribes from a second tab or after a reload, with one ``GET /runs/{id}``. A token is issued
only to an API-key caller, never in exchange for another token.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import WithJsonSchema

from app.api import control
from app.api.errors import documented
from app.api.listing import check_cursor, check_status, metadata_filters
from app.api.pipeline import IDEMPOTENCY_KEY_MAX, RunRequest, submit
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.lean import LeanRoute, bind_create_run, lean
from app.api.run_view import load_run, run_object
from app.api.schemas import CreateRun, Run, RunList
from app.api.services import Services
from app.api.thread_view import answer_post
from app.store.ids import RUN_ID, thread_of_run
from app.store.records import RunRecord

router = APIRouter(tags=["runs"], route_class=LeanRoute)
_STATUSES = ("queued", "running", "requires_action", "completed", "failed", "cancelled")


@router.post("/runs", status_code=201, operation_id="createRun", response_model=Run,
             responses={200: {"model": Run, "description": "idempotent repeat"},
                        **documented(400, 401, 403, 404, 409, 413, 415, 422, 503)})
@lean(bind_create_run)  # every run starts here: bound without FastAPI's generic handling
async def create_run(body: CreateRun, response: Response, svc: ServicesDep,
                     who: PrincipalDep,
                     idempotency_key: Annotated[str | None, Header(
                         json_schema_extra={"maxLength": IDEMPOTENCY_KEY_MAX})] = None) -> Run:
    """Start a run; it proceeds on a worker while this returns. With ``thread_id``: the same
    as ``POST /threads/{thread_id}/runs``."""
    request = RunRequest(principal=who, options=body, input=body.input,
                         thread_id=body.thread_id, idempotency_key=idempotency_key,
                         digest_of=body.model_dump(mode="json"), agent=body.agent,
                         set_fields=body.options_set())
    done = await submit(svc, request)
    if done.outcome is not None:
        return await answer_post(svc, who, done.outcome, response)
    assert done.record is not None
    if not done.created:
        response.status_code = 200
    response.headers["Location"] = f"/runs/{done.run_id}"
    run = await run_object(svc.backend, done.record, fresh=done.created)
    return _with_token(run, svc, done.record)


def _with_token(run: Run, svc: Services, record: RunRecord) -> Run:
    """``run`` (the view of ``record``) with a fresh stream token for its events."""
    run.stream_token = svc.auth.issue_token(run.id, record.tenant, owner=record.owner)
    return run


@router.get("/runs/{run_id}", response_model=Run, operation_id="getRun",
            responses=documented(401, 404, 503))
async def get_run(run_id: str, svc: ServicesDep, who: PrincipalDep) -> Run:
    """One of the caller's runs, with a fresh ``stream_token`` for its events."""
    record = await load_run(svc.backend, run_id, who)
    return _with_token(await run_object(svc.backend, record), svc, record)


@router.get("/runs", response_model=RunList, operation_id="listRuns",
            responses=documented(401, 422, 503))
async def list_runs(request: Request, svc: ServicesDep, who: PrincipalDep,
                    status: Annotated[str | None, WithJsonSchema(
                        {"x-component": "RunStatus"})] = None,
                    limit: Annotated[int, Query(ge=1, le=100)] = 20,
                    cursor: str | None = None) -> RunList:
    """The caller's runs (an end user's: its own), newest first; filter by ``status`` and
    ``metadata.<key>=<value>``."""
    check_status(status, _STATUSES)
    check_cursor(cursor, lambda run_id: bool(RUN_ID.fullmatch(run_id)))
    page = await svc.backend.list_runs(who.tenant, status=status,
                                       metadata=metadata_filters(request), limit=limit,
                                       cursor=cursor, owner=who.subject)
    mine = [r for r in page.runs if who.sees(r.tenant, r.owner, thread_of_run(r.id))]
    runs = await asyncio.gather(*(run_object(svc.backend, r) for r in mine))
    return RunList(runs=[_with_token(run, svc, r) for run, r in zip(runs, mine, strict=True)],
                   next_cursor=page.next_cursor)


@router.post("/runs/{run_id}/cancel", status_code=202, response_model=Run,
             operation_id="cancelRun", responses=documented(401, 404, 413, 415, 503))
async def cancel_run(run_id: str, svc: ServicesDep, who: PrincipalDep) -> Run:
    """Abort the run (idempotent; a no-op once it has ended). A parked run is woken to end."""
    record = await control.cancel(svc, who, run_id)
    return _with_token(await run_object(svc.backend, record), svc, record)
