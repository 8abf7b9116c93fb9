"""``/runs``: create, read, list and cancel runs.

Every Run these routes return carries a fresh ``stream_token`` for its events (read-only, scoped
to that run and tenant, ``AGENTLOOP_STREAM_TOKEN_TTL`` s): a page renews an expired token, or
subscribes from a second tab or after a reload, with one ``GET /runs/{id}``. A token is issued
only to an API-key caller, never in exchange for another token.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import WithJsonSchema

from app.api.errors import ApiError, documented
from app.api.hitl_checks import check_hitl
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.strict_json import StrictJsonRoute
from app.api.run_requests import (
    check_model,
    check_timeout,
    check_tools,
    request_hash,
    stored_request,
)
from app.api.run_view import RUN_ID, load_run, run_object
from app.api.schemas import CreateRun, Run, RunList
from app.engine.events import RunCreated
from app.process.services import Services
from app.store.contract import TERMINAL, RunRecord
from app.telemetry import metrics
from app.telemetry.logs import bind

router = APIRouter(tags=["runs"], route_class=StrictJsonRoute)
_STATUSES = ("queued", "running", "requires_action", "completed", "failed", "cancelled")
IDEMPOTENCY_KEY_MAX = 255
"""Longest ``Idempotency-Key`` accepted (it becomes part of a store key)."""


def new_run_id() -> str:
    """A fresh, unguessable run id."""
    return f"run_{uuid.uuid4().hex}"


def check_idempotency_key(key: str | None) -> None:
    """422 for an ``Idempotency-Key`` longer than ``IDEMPOTENCY_KEY_MAX``."""
    if key is not None and len(key) > IDEMPOTENCY_KEY_MAX:
        raise ApiError(422, "validation_error", f"Idempotency-Key: at most "
                       f"{IDEMPOTENCY_KEY_MAX} characters", "Idempotency-Key")


@router.post("/runs", status_code=201, operation_id="createRun", response_model=Run,
             responses={200: {"model": Run, "description": "idempotent repeat"},
                        **documented(400, 401, 404, 409, 413, 415, 422, 503)})
async def create_run(body: CreateRun, response: Response, svc: ServicesDep,
                     who: PrincipalDep,
                     idempotency_key: Annotated[str | None, Header(
                         json_schema_extra={"maxLength": IDEMPOTENCY_KEY_MAX})] = None) -> Run:
    """Start a run; it proceeds on a worker while this returns. With ``thread_id``: the same
    as ``POST /threads/{thread_id}/runs``."""
    if body.thread_id is not None:
        from app.api.routes.threads import answer_post

        return await answer_post(svc, who.tenant, body.thread_id, body, response,
                                 idempotency_key)
    if body.multitask is not None:
        raise ApiError(422, "validation_error", "multitask: only with thread_id", "multitask")
    check_idempotency_key(idempotency_key)
    model = body.model or svc.default_model
    check_model(model, svc.resolve_provider)
    check_tools(body, registry=svc.registry, disabled=svc.settings.disabled_tool_list(),
                env=svc.env)
    check_timeout(body, svc.settings.run_timeout)
    check_hitl(body, registry=svc.registry, disabled=svc.settings.disabled_tool_list(),
               env=svc.env)
    record = RunRecord(id=new_run_id(), tenant=who.tenant, model=model,
                       created_at=time.time(), metadata=dict(body.metadata),
                       request=stored_request(body, model))
    key = f"{who.tenant}:{idempotency_key}" if idempotency_key else None
    digest = request_hash({"tenant": who.tenant, "body": body.model_dump(mode="json")})
    record, created = await svc.backend.create_run(record, idempotency_key=key,
                                                   request_hash=digest,
                                                   first_event=RunCreated(model=model))
    with bind(run_id=record.id, tenant=who.tenant):
        if created:
            metrics.RUNS_CREATED.inc()
        else:
            response.status_code = 200
    response.headers["Location"] = f"/runs/{record.id}"
    return _with_token(await run_object(svc.backend, record, fresh=created), svc, who.tenant)


def _with_token(run: Run, svc: Services, tenant: str) -> Run:
    """``run`` with a fresh stream token for its events."""
    run.stream_token = svc.auth.issue_token(run.id, tenant)
    return run


@router.get("/runs/{run_id}", response_model=Run, operation_id="getRun",
            responses=documented(401, 404, 503))
async def get_run(run_id: str, svc: ServicesDep, who: PrincipalDep) -> Run:
    """One of the caller's runs, with a fresh ``stream_token`` for its events."""
    record = await load_run(svc.backend, run_id, who.tenant)
    return _with_token(await run_object(svc.backend, record), svc, who.tenant)


def _metadata_filters(request: Request) -> dict[str, str]:
    return {k.removeprefix("metadata."): v for k, v in request.query_params.items()
            if k.startswith("metadata.") and len(k) > len("metadata.")}


def _check_cursor(cursor: str | None) -> None:
    """422 unless ``cursor`` has the shape ``next_cursor`` has (``<created_at>|<run id>``); the
    backends would otherwise restart from the newest run or pass a NaN score to the store."""
    if not cursor:
        return
    created, _, run_id = cursor.partition("|")
    try:
        ok = math.isfinite(float(created)) and bool(RUN_ID.fullmatch(run_id))
    except ValueError:
        ok = False
    if not ok:
        raise ApiError(422, "validation_error", "cursor: not a cursor this API returned",
                       "cursor")


@router.get("/runs", response_model=RunList, operation_id="listRuns",
            responses=documented(401, 422, 503))
async def list_runs(request: Request, svc: ServicesDep, who: PrincipalDep,
                    status: Annotated[str | None, WithJsonSchema(
                        {"x-component": "RunStatus"})] = None,
                    limit: Annotated[int, Query(ge=1, le=100)] = 20,
                    cursor: str | None = None) -> RunList:
    """The caller's runs, newest first; filter by ``status`` and ``metadata.<key>=<value>``."""
    if status is not None and status not in _STATUSES:
        raise ApiError(422, "validation_error", f"status must be one of {', '.join(_STATUSES)}",
                       "status")
    _check_cursor(cursor)
    try:
        page = await svc.backend.list_runs(who.tenant, status=status,
                                           metadata=_metadata_filters(request), limit=limit,
                                           cursor=cursor)
    except ValueError as exc:
        raise ApiError(422, "validation_error", "invalid cursor", "cursor") from exc
    runs = await asyncio.gather(*(run_object(svc.backend, r) for r in page.runs))
    return RunList(runs=[_with_token(run, svc, who.tenant) for run in runs],
                   next_cursor=page.next_cursor)


@router.post("/runs/{run_id}/cancel", status_code=202, response_model=Run,
             operation_id="cancelRun", responses=documented(401, 404, 413, 415, 503))
async def cancel_run(run_id: str, svc: ServicesDep, who: PrincipalDep) -> Run:
    """Abort the run (idempotent; a no-op once it has ended). A parked run is woken to end."""
    record = await load_run(svc.backend, run_id, who.tenant)
    if record.status not in TERMINAL:
        await svc.backend.request_cancel(run_id)
        await svc.backend.wake(run_id)
    return _with_token(await run_object(svc.backend, record), svc, who.tenant)
