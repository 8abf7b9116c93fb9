"""``/threads``: conversations that continue across runs (``app/threads``).

``POST /threads/{id}/runs`` takes the body of ``POST /runs``; ``input`` is the new user
message(s) only, ``multitask`` says what they do while the thread is busy (default
``enqueue``). The answer is the Run that carries the message, with ``multitask`` saying what
happened: ``201`` a new run, ``202`` queued into an existing one, ``200`` an idempotent replay.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from sse_starlette import EventSourceResponse

from app.api.errors import ApiError, documented
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.runs import IDEMPOTENCY_KEY_MAX, check_idempotency_key
from app.api.routes.strict_json import StrictJsonRoute
from app.api.schemas import CreateRun, Run
from app.api.thread_posts import STATUS, check_thread_id, post_message, thread_not_found
from app.api.thread_schemas import CreateThread, Thread, ThreadList
from app.api.thread_view import post_answer, settled, thread_object
from app.delivery.thread_stream import parse_position, thread_stream
from app.process.services import Services
from app.store.ids import is_thread_id, new_thread_id
from app.store.thread_records import ThreadRecord
from app.store.threads import threads

router = APIRouter(tags=["threads"], route_class=StrictJsonRoute)
_STATUSES = ("idle", "busy")


async def load_thread(svc: Services, thread_id: str, tenant: str) -> ThreadRecord:
    """The tenant's thread, settled; 404 for a missing one or another tenant's."""
    check_thread_id(thread_id)
    record = await threads(svc.backend).get_thread(thread_id)
    if record is None or record.tenant != tenant:
        raise thread_not_found(thread_id)
    return await settled(svc.backend, record)


@router.post("/threads", operation_id="createThread",
             status_code=201, response_model=Thread,
             responses=documented(400, 401, 413, 415, 422, 503))
async def create_thread(response: Response, svc: ServicesDep, who: PrincipalDep,
                        body: CreateThread | None = None) -> Thread:
    """A new, idle thread."""
    now = time.time()
    record = ThreadRecord(id=new_thread_id(), tenant=who.tenant, created_at=now, updated_at=now,
                          metadata=dict(body.metadata) if body else {})
    await threads(svc.backend).create_thread(record)
    response.headers["Location"] = f"/threads/{record.id}"
    return await thread_object(svc.backend, record, svc.auth)


@router.get("/threads/{thread_id}", operation_id="getThread",
             response_model=Thread, responses=documented(401, 404, 503))
async def get_thread(thread_id: str, svc: ServicesDep, who: PrincipalDep) -> Thread:
    """The thread: status, conversation, runs, with a fresh ``stream_token``."""
    record = await load_thread(svc, thread_id, who.tenant)
    return await thread_object(svc.backend, record, svc.auth)


def _check_cursor(cursor: str | None) -> None:
    if not cursor:
        return
    created, _, thread_id = cursor.partition("|")
    try:
        ok = math.isfinite(float(created)) and is_thread_id(thread_id)
    except ValueError:
        ok = False
    if not ok:
        raise ApiError(422, "validation_error", "cursor: not a cursor this API returned",
                       "cursor")


@router.get("/threads", operation_id="listThreads",
             response_model=ThreadList, responses=documented(401, 422, 503))
async def list_threads(request: Request, svc: ServicesDep, who: PrincipalDep,
                       status: str | None = None,
                       limit: Annotated[int, Query(ge=1, le=100)] = 20,
                       cursor: str | None = None) -> ThreadList:
    """The caller's threads, newest first; filter by ``status`` (``idle``/``busy``) and
    ``metadata.<key>=<value>``."""
    if status is not None and status not in _STATUSES:
        raise ApiError(422, "validation_error", "status must be one of idle, busy", "status")
    _check_cursor(cursor)
    metadata = {k.removeprefix("metadata."): v for k, v in request.query_params.items()
                if k.startswith("metadata.") and len(k) > len("metadata.")}
    page = await threads(svc.backend).list_threads(who.tenant, status=status, metadata=metadata,
                                                   limit=limit, cursor=cursor)
    found = await asyncio.gather(*(thread_object(svc.backend, t, svc.auth)
                                   for t in page.threads))
    return ThreadList(threads=list(found), next_cursor=page.next_cursor)


@router.delete("/threads/{thread_id}", operation_id="deleteThread",
             status_code=204, responses=documented(401, 404, 503))
async def delete_thread(thread_id: str, svc: ServicesDep, who: PrincipalDep) -> Response:
    """Delete the thread; its active run is cancelled first (a waiting one never starts)."""
    await load_thread(svc, thread_id, who.tenant)
    await threads(svc.backend).delete_thread(thread_id)
    return Response(status_code=204)


async def answer_post(svc: Services, tenant: str, thread_id: str, body: CreateRun,
                      response: Response, idempotency_key: str | None) -> Run:
    """Post to a thread and answer with the Run that carries the message."""
    check_idempotency_key(idempotency_key)
    outcome = await post_message(svc, tenant, thread_id, body, idempotency_key)
    response.status_code = 200 if outcome.repeat else STATUS[outcome.action]
    response.headers["Location"] = f"/runs/{outcome.run_id}"
    return await post_answer(svc.backend, outcome, svc.auth, tenant)


@router.post("/threads/{thread_id}/runs", operation_id="createThreadRun",
             status_code=201, response_model=Run,
             responses={200: {"model": Run, "description": "idempotent repeat"},
                        202: {"model": Run, "description": "queued into an existing run"},
                        **documented(400, 401, 404, 409, 413, 415, 422, 503)})
async def post_thread_run(thread_id: str, body: CreateRun, response: Response,
                          svc: ServicesDep, who: PrincipalDep,
                          idempotency_key: Annotated[str | None, Header(
                              json_schema_extra={"maxLength": IDEMPOTENCY_KEY_MAX})] = None
                          ) -> Run:
    """Send the next user message(s) of the conversation (see the module docstring)."""
    return await answer_post(svc, who.tenant, thread_id, body, response, idempotency_key)


@router.get("/threads/{thread_id}/events", operation_id="streamThreadEvents",
             response_class=EventSourceResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "id: <n>-<seq>, event: type, data: the event's "
                                            "JSON (with its run_id)"},
                       **documented(401, 404, 422, 503)})
async def thread_events(thread_id: str, request: Request, svc: ServicesDep,
                        after: Annotated[str | None, Query(
                            description="resume after this event id (<n>-<seq>)")] = None,
                        token: Annotated[str | None, Query(
                            description="the thread's stream token")] = None,
                        last_event_id: Annotated[str | None, Header()] = None) -> Response:
    """Every event of every run of the thread, in order, then live ones, the next run's
    included: one subscription for the whole conversation. Resumes after ``Last-Event-ID``
    (or ``?after=``) across run boundaries; ``?token=`` takes the thread's stream token."""
    who = svc.auth.authenticate(request, stream_run_id=thread_id)
    start = _position(last_event_id, "Last-Event-ID") or _position(after, "after")
    record = await load_thread(svc, thread_id, who.tenant)
    return thread_stream(svc.backend, thread_id, start or (1, 0), record.runs,
                         ping=svc.settings.sse_ping_seconds, retry=svc.settings.sse_retry_seconds)


def _position(value: str | None, field: str) -> tuple[int, int] | None:
    if not value:
        return None
    position = parse_position(value)
    if position is None:
        raise ApiError(422, "validation_error", f"{field} must be an event id of this stream "
                       "(<n>-<seq>)", field)
    return position
