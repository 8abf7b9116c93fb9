"""``/threads``: conversations that continue across runs.

``POST /threads/{id}/runs`` takes the body of ``POST /runs``; ``input`` is the new user
message(s) only, ``multitask`` says what they do while the thread is busy (default
``enqueue``). The answer is the Run that carries the message, with ``multitask`` saying what
happened: ``201`` a new run, ``202`` queued into an existing one, ``200`` an idempotent replay.
``GET /threads`` lists summaries; ``GET /threads/{id}`` has the conversation and the runs.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from sse_starlette import EventSourceResponse

from app.api import control
from app.api.checks import invalid
from app.api.errors import ApiError, documented
from app.api.listing import check_cursor, check_status, metadata_filters
from app.api.pipeline import IDEMPOTENCY_KEY_MAX, RunRequest, submit
from app.api.routes.deps import PrincipalDep, ServicesDep, caller
from app.api.routes.strict_json import StrictJsonRoute
from app.api.schemas import CreateRun, Run
from app.api.thread_schemas import CreateThread, Thread, ThreadList
from app.api.thread_view import answer_post, thread_object, thread_summary
from app.delivery.thread_stream import parse_position, thread_stream
from app.store.ids import is_thread_id, new_thread_id
from app.store.thread_records import ThreadRecord

router = APIRouter(tags=["threads"], route_class=StrictJsonRoute)
_STATUSES = ("idle", "busy")


@router.post("/threads", operation_id="createThread",
             status_code=201, response_model=Thread,
             responses=documented(400, 401, 413, 415, 422, 503))
async def create_thread(response: Response, svc: ServicesDep, who: PrincipalDep,
                        body: CreateThread | None = None) -> Thread:
    """A new, idle thread (an end user's own; not for a token that lists its threads)."""
    if who.threads is not None:
        raise ApiError(403, "forbidden", "this token may use only the threads it lists")
    now = time.time()
    record = ThreadRecord(id=new_thread_id(), tenant=who.tenant, created_at=now, updated_at=now,
                          metadata=dict(body.metadata) if body else {}, owner=who.subject)
    await svc.backend.create_thread(record)
    response.headers["Location"] = f"/threads/{record.id}"
    return await thread_object(svc.backend, record, svc.auth)


@router.get("/threads/{thread_id}", operation_id="getThread",
             response_model=Thread, responses=documented(401, 404, 503))
async def get_thread(thread_id: str, svc: ServicesDep, who: PrincipalDep) -> Thread:
    """The thread: status, conversation, runs, with a fresh ``stream_token``."""
    record = await control.load_thread(svc, who, thread_id)
    return await thread_object(svc.backend, record, svc.auth)


@router.get("/threads", operation_id="listThreads",
             response_model=ThreadList, responses=documented(401, 422, 503))
async def list_threads(request: Request, svc: ServicesDep, who: PrincipalDep,
                       status: str | None = None,
                       limit: Annotated[int, Query(ge=1, le=100)] = 20,
                       cursor: str | None = None) -> ThreadList:
    """The caller's threads (an end user's: its own) as summaries, newest first; filter by
    ``status`` (``idle``/``busy``) and ``metadata.<key>=<value>``."""
    check_status(status, _STATUSES)
    check_cursor(cursor, is_thread_id)
    page = await svc.backend.list_threads(who.tenant, status=status,
                                          metadata=metadata_filters(request), limit=limit,
                                          cursor=cursor, owner=who.subject)
    return ThreadList(threads=[thread_summary(t, svc.auth) for t in page.threads
                               if who.sees(t.tenant, t.owner, t.id)],
                      next_cursor=page.next_cursor)


@router.delete("/threads/{thread_id}", operation_id="deleteThread",
             status_code=204, responses=documented(401, 404, 503))
async def delete_thread(thread_id: str, svc: ServicesDep, who: PrincipalDep) -> Response:
    """Delete the thread; its active run is cancelled (woken to end if it waits for
    approvals), and a run waiting to start never starts."""
    await control.delete_thread(svc, who, thread_id)
    return Response(status_code=204)


@router.post("/threads/{thread_id}/runs", operation_id="createThreadRun",
             status_code=201, response_model=Run,
             responses={200: {"model": Run, "description": "idempotent repeat"},
                        202: {"model": Run, "description": "queued into an existing run"},
                        **documented(400, 401, 403, 404, 409, 413, 415, 422, 503)})
async def post_thread_run(thread_id: str, body: CreateRun, response: Response,
                          svc: ServicesDep, who: PrincipalDep,
                          idempotency_key: Annotated[str | None, Header(
                              json_schema_extra={"maxLength": IDEMPOTENCY_KEY_MAX})] = None
                          ) -> Run:
    """Send the next user message(s) of the conversation (see the module docstring)."""
    if body.thread_id is not None and body.thread_id != thread_id:
        raise invalid("thread_id", "differs from the thread in the path")
    done = await submit(svc, RunRequest(principal=who, options=body, input=body.input,
                                        thread_id=thread_id, idempotency_key=idempotency_key,
                                        digest_of=body.model_dump(mode="json"),
                                        agent=body.agent, set_fields=body.options_set()))
    assert done.outcome is not None
    return await answer_post(svc, who, done.outcome, response)


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
    who = await caller(svc, request, stream_run_id=thread_id)
    start = _position(last_event_id, "Last-Event-ID") or _position(after, "after")
    record = await control.load_thread(svc, who, thread_id)
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
