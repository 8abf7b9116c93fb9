"""``GET /runs/{id}/events``: the run's events as server-sent events (see ``app/delivery/sse.py``).

The end of a run is unmistakable to a browser: the stream closes after the run's own
(``depth`` 0) ``agent_end``, the last event of its log, and any later request for the run's
events with nothing left after its position (``Last-Event-ID`` or ``?after=``) is ``204 No
Content``: "a client can be told to stop reconnecting using the HTTP 204 No Content response
code" (HTML spec, "Server-sent events"), so an ``EventSource`` reconnects once after the end,
gets 204 and closes for good instead of reconnecting forever.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from sse_starlette import EventSourceResponse

from app.api.errors import ApiError, documented
from app.api.routes.deps import ServicesDep, caller
from app.api.routes.lean import LeanRoute, bind_run_events, lean
from app.api.run_view import check_run_id, owned
from app.delivery.sse import PAGE, event_stream
from app.store.fresh_runs import FreshRuns
from app.store.records import TERMINAL

router = APIRouter(tags=["events"], route_class=LeanRoute)
MAX_SEQ = 2**63 - 1
"""Largest seq a client may resume after (a Redis stream id's part is 64-bit)."""


def parse_seq(value: str | None, field: str) -> int:
    """ASCII digits only (``str.isdigit`` also passes ``"²"``, which ``int`` refuses), and the
    length is checked before ``int`` parses it."""
    if value is None or value == "":
        return 0
    if not (value.isascii() and value.isdigit() and len(value) <= 19 and int(value) <= MAX_SEQ):
        raise ApiError(422, "validation_error",
                       f"{field} must be an integer from 0 to {MAX_SEQ}", field)
    return int(value)


_STREAM = {"text/event-stream": {"schema": {"$ref": "#/components/schemas/Event"}}}
"""Each frame's ``data:`` is one ``Event`` (``id:`` its seq, ``event:`` its type)."""


@router.get("/runs/{run_id}/events", response_class=EventSourceResponse,
            operation_id="streamRunEvents",
            responses={200: {"content": _STREAM, "description":
                             "server-sent events: id: seq, event: type, data: the Event's JSON"},
                       204: {"description": "the run has ended and nothing is left after the "
                                            "given position: stop reconnecting"},
                       **documented(401, 404, 422, 503)})
@lean(bind_run_events)  # every run's stream starts here: bound without FastAPI's handling
async def run_events(run_id: str, request: Request, svc: ServicesDep,
                     after: Annotated[str | None, Query(description="resume after seq")] = None,
                     token: Annotated[str | None, Query(description="stream token")] = None,
                     last_event_id: Annotated[str | None, Header()] = None) -> Response:
    """Replay the run's events (after ``Last-Event-ID`` or ``?after=``), then tail them live;
    the stream closes after the run's own ``agent_end`` (``depth`` 0), and a request for an
    ended run with nothing left after its position is ``204``. ``?token=`` accepts the run's
    stream token (``GET /runs/{id}`` returns a fresh one)."""
    who = await caller(svc, request, stream_run_id=run_id)
    start = max(parse_seq(after, "after"), parse_seq(last_event_id, "Last-Event-ID"))
    check_run_id(run_id)
    fresh = getattr(svc.backend, "fresh_runs", None)
    made = fresh.get(run_id) if isinstance(fresh, FreshRuns) and start == 0 else None
    if made is not None and who.sees(made.tenant, made.owner, None):
        # created by this process a moment ago: its first event is known, the log follows
        first, ended = [made.first], False
    else:
        # the access check and the first page of the log in one store round trip
        record, first = await svc.backend.get_run_and_events(run_id, start, PAGE)
        ended = owned(record, run_id, who).status in TERMINAL
        if ended and not first:
            # the run's final status is written with its agent_end, and read before the log
            # here: an ended run with nothing after ``start`` has nothing left to send, ever
            return Response(status_code=204, headers={"Cache-Control": "no-store"})
    return event_stream(svc.backend, run_id, start, ping=svc.settings.sse_ping_seconds,
                        retry=svc.settings.sse_retry_seconds, first=first, ended=ended)
