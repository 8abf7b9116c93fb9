"""``/ag-ui``: the AG-UI endpoint (protocol 1.0) an ``HttpAgent`` of ``@ag-ui/client`` runs.

``POST /ag-ui`` takes a ``RunAgentInput``, posts its last user message to the thread named by
``threadId`` (``app/dialects/conversation.py``) and streams the run that carries it as AG-UI
events (``app/dialects/ag_ui/projector.py``). ``RUN_STARTED.runId`` is our run id (the
client's ``runId`` is kept in the run's metadata as ``ag_ui_run_id``): steer, follow up or
cancel through ``/runs/{run_id}/...``. ``GET /ag-ui/threads/{thread_id}/stream`` replays the
thread's active run from its start and goes on live (``204`` when it has none), for a client
recovering after a reload. Aborting the request (``abortRun()``) leaves the run running unless
``forwardedProps.agentloop.cancel_on_disconnect`` is true.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import RunAgentInput, RunStartedEvent
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Request, Response
from sse_starlette import EventSourceResponse

from app.api import control
from app.api.auth import Principal
from app.api.control import AnswerIn
from app.api.errors import ApiError, documented
from app.api.pipeline import submit
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.strict_json import StrictJsonRoute
from app.api.services import Services
from app.api.stream_limits import streaming
from app.delivery.sse import EventStreamResponse
from app.dialects.ag_ui.messages import history
from app.dialects.ag_ui.projector import AgUiProjector
from app.dialects.ag_ui.request import (
    agent_name,
    agentloop_props,
    client_tools,
    start_state,
    to_messages,
    tool_answers,
    wire_name,
)
from app.dialects.conversation import CHAT_ID, active_run, turn
from app.dialects.tail import poll_seconds, projected_frames
from app.engine.approvals import Decision
from app.store.contract import Backend
from providers.messages import TextContent

router = APIRouter(tags=["ag-ui"], route_class=StrictJsonRoute)
_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "AG-UI events"}}


def ag_ui_stream(backend: Backend, run_id: str, projector: AgUiProjector, *, poll: float,
                 cancel_on_disconnect: bool = False, after: int = 0,
                 head: bytes = b"") -> EventStreamResponse:
    """The run's log projected as AG-UI events."""
    frames = projected_frames(backend, run_id, projector, poll=poll, after=after,
                              cancel_on_disconnect=cancel_on_disconnect)
    response = EventStreamResponse(_after(head, frames) if head else frames)
    response.headers["x-accel-buffering"] = "no"
    return response


async def _after(head: bytes, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield head
    async for frame in frames:
        yield frame


async def _answer_run(body: RunAgentInput, svc: Services, who: Principal,
                      cancel_on_disconnect: bool) -> Response:
    """The thread's waiting run takes the results in the input's trailing tool messages, all
    or none; a new AG-UI run (RUN_STARTED with our run id) shows the rest of it."""
    record = await active_run(svc.backend, who, body.thread_id)
    if record is None or record.status != "requires_action":
        raise ApiError(409, "not_waiting", "the thread has no run waiting for a tool result",
                       "messages")
    state = await svc.backend.parked_state(record.id)
    waiting = {c["tool_call_id"] for c in (state.calls if state else [])
               if state is not None and c["kind"] == "client_tool"
               and c["tool_call_id"] not in state.decisions}
    taken = [a for a in tool_answers(body) if a[0] in waiting]
    if not taken:
        raise ApiError(409, "unknown_call", "the input's tool messages answer no call the "
                       "run waits for", "messages")
    await control.answer(svc, who, record.id, [
        AnswerIn(call_id, "client_tool", Decision(
            kind="result", content=[TextContent(text=text)], is_error=failed), field)
        for call_id, text, failed, field in taken])
    projector = AgUiProjector(body.thread_id, continues_after=record.last_seq)
    head = b"id: %d\n%s" % (record.last_seq, EventEncoder().encode(
        RunStartedEvent(thread_id=body.thread_id, run_id=record.id)).encode())
    return ag_ui_stream(svc.backend, record.id, projector, after=record.last_seq, head=head,
                        poll=poll_seconds(svc.settings.sse_ping_seconds),
                        cancel_on_disconnect=cancel_on_disconnect)


def _check_thread(thread_id: str, field: str) -> None:
    if not re.fullmatch(CHAT_ID, thread_id):
        raise ApiError(422, "validation_error",
                       f"{field}: 1 to 128 letters, digits, '_' or '-'", field)


@router.post("/ag-ui", operation_id="agUiRunAgent",
             response_class=EventSourceResponse,
             responses={**_STREAM, **documented(400, 401, 403, 409, 413, 415, 422, 503)})
async def run_agent(body: RunAgentInput, svc: ServicesDep, who: PrincipalDep,
                    request: Request) -> Response:
    """Run the agent on the input's last user message; stream AG-UI events. An end user's
    stream is counted before anything is posted (``app.api.stream_limits``)."""
    return await streaming(request, _run_agent(body, svc, who))


async def _run_agent(body: RunAgentInput, svc: Services, who: Principal) -> Response:
    _check_thread(body.thread_id, "threadId")
    props = agentloop_props(body)
    if body.messages and body.messages[-1].role == "tool":
        return await _answer_run(body, svc, who, props.cancel_on_disconnect)
    prompt, system = to_messages(body)
    options, set_fields = props.option_fields(), props.options_set()
    options["system"] = "\n\n".join(s for s in (props.system, system) if s) or None
    options["metadata"] = {**props.metadata, "ag_ui_run_id": body.run_id[:255]}
    options["client_tools"] = client_tools(body)
    if (state := start_state(body)) is not None:
        options["state"], set_fields = state, set_fields | {"state"}
    if system:  # the input's system and developer messages, its context: the page's
        set_fields |= {"system"}
    if body.tools:
        set_fields |= {"client_tools"}
    done = await submit(svc, turn(who, body.thread_id, prompt, options, wire_name(body),
                                  agent=agent_name(body), set_fields=set_fields))
    projector = AgUiProjector(body.thread_id)
    return ag_ui_stream(svc.backend, done.run_id, projector,
                        poll=poll_seconds(svc.settings.sse_ping_seconds),
                        cancel_on_disconnect=props.cancel_on_disconnect)


@router.get("/ag-ui/threads/{thread_id}/stream", operation_id="agUiReconnect",
             response_class=EventSourceResponse,
            responses={**_STREAM, 204: {"description": "the thread has no active run"},
                       **documented(401, 404, 503)})
async def reconnect(thread_id: str, svc: ServicesDep, who: PrincipalDep) -> Response:
    """The thread's active run, replayed from its start, then live; ``204`` if none."""
    if not re.fullmatch(CHAT_ID, thread_id):
        raise ApiError(404, "not_found", "no such thread")
    record = await active_run(svc.backend, who, thread_id)
    if record is None:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    before, prompts = await svc.backend.thread_run_inputs(record.id)
    messages = [*before, *prompts]
    projector = AgUiProjector(thread_id, history(messages, record.id))
    return ag_ui_stream(svc.backend, record.id, projector,
                        poll=poll_seconds(svc.settings.sse_ping_seconds))
