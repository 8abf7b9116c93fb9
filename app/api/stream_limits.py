"""``AGENTLOOP_MAX_STREAMS_PER_USER`` for the doors that start work and then stream it (a
toolkit's ``POST``): the caller's stream hold is taken before the work, so a request over the
limit is a ``429`` that starts nothing (a stream refused only when it began to send would
leave its run going, unseen). The hold goes to the stream, which gives it back when it ends
(``app.delivery.stream_holds``; a door that only streams, a ``GET``, takes it there)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from app.api.errors import ApiError
from app.delivery.sse import EventStreamResponse
from app.delivery.stream_holds import Hold, hold_of
from app.telemetry import metrics


def too_many_streams(limit: int) -> ApiError:
    """429 ``too_many_streams`` (``Retry-After: 1``), counted."""
    metrics.LIMIT_REFUSALS.labels(limit="max_streams_per_user").inc()
    return ApiError(429, "too_many_streams", f"this user already has {limit} "
                    "event streams open here (AGENTLOOP_MAX_STREAMS_PER_USER): close one "
                    "first", headers={"Retry-After": "1"})


def reserve(request: Request) -> Hold | None:
    """The caller's stream hold, taken now (429 when it has its limit); None when its
    streams are not counted (the tenant's key, or no limit)."""
    found = hold_of(request.scope)
    if found is None:
        return None
    holds, holder = found
    hold = holds.take(holder)
    if hold is None:
        raise too_many_streams(holds.limit)
    return hold


async def streaming(request: Request, work: Coroutine[Any, Any, Response]) -> Response:
    """``work``'s response with the caller's stream hold taken before it ran: handed to the
    stream it returns, given back at once when it fails or returns anything else."""
    try:
        hold = reserve(request)
    except ApiError:
        work.close()  # never started
        raise
    try:
        response = await work
    except BaseException:
        if hold is not None:
            hold.release()
        raise
    if hold is not None:
        if isinstance(response, EventStreamResponse):
            response.reserved = hold
        else:
            hold.release()
    return response
