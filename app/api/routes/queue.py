"""Steering and follow-up queues of a run: add, list, withdraw.

Each change is also written to the run's event log (``message_queued`` / ``message_withdrawn``)
so every subscriber sees it in order with the loop's own events, in the same atomic store step
as the change itself. Once the run is ending (its loop closed the queues, finding them empty)
or has ended, a new message is refused with 409 ``run_ended``, and while the run holds
``max_queued_messages`` waiting with 409 ``queue_full``: a 202 means the loop will take the
message (unless the run is cancelled or fails first).
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api import control
from app.api.errors import documented
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.strict_json import StrictJsonRoute
from app.api.run_view import load_run
from app.api.schemas import Queued, QueueItem, QueueList, QueueMessageIn
from providers.messages import dump_message

router = APIRouter(tags=["queue"], route_class=StrictJsonRoute)
_ENQUEUE_ERRORS = documented(400, 401, 404, 409, 413, 415, 422, 503)


@router.post("/runs/{run_id}/steer", status_code=202, response_model=Queued,
             operation_id="steerRun",
             responses=_ENQUEUE_ERRORS)
async def steer(run_id: str, body: QueueMessageIn, svc: ServicesDep,
                who: PrincipalDep) -> Queued:
    """Queue a steering message: injected after the running tool (remaining picks skipped)."""
    message_id, position = await control.enqueue(svc, who, run_id, "steer", body.content)
    return Queued(message_id=message_id, kind="steer", position=position)


@router.post("/runs/{run_id}/follow_up", status_code=202, response_model=Queued,
             operation_id="followUpRun",
             responses=_ENQUEUE_ERRORS)
async def follow_up(run_id: str, body: QueueMessageIn, svc: ServicesDep,
                    who: PrincipalDep) -> Queued:
    """Queue a follow-up message: taken when the loop would otherwise stop."""
    message_id, position = await control.enqueue(svc, who, run_id, "follow_up", body.content)
    return Queued(message_id=message_id, kind="follow_up", position=position)


@router.get("/runs/{run_id}/queue", response_model=QueueList, operation_id="getRunQueue",
            responses=documented(401, 404, 503))
async def list_queue(run_id: str, svc: ServicesDep, who: PrincipalDep) -> QueueList:
    """Messages still waiting, steering first, oldest first."""
    await load_run(svc.backend, run_id, who)
    items: list[QueueItem] = []
    positions = {"steer": 0, "follow_up": 0}
    for kind, queued in await svc.backend.list_queue(run_id):
        positions[kind] += 1
        content = dump_message(queued.message)["content"]
        items.append(QueueItem(message_id=queued.id, kind=kind, position=positions[kind],
                               content=content))
    return QueueList(messages=items)


@router.delete("/runs/{run_id}/queue/{message_id}", status_code=204,
               operation_id="withdrawQueuedMessage",
               responses=documented(401, 404, 409, 503))
async def withdraw(run_id: str, message_id: str, svc: ServicesDep,
                   who: PrincipalDep) -> Response:
    """Withdraw a message the loop has not taken yet."""
    await control.withdraw(svc, who, run_id, message_id)
    return Response(status_code=204)
