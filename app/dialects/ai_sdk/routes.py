"""``/ai-sdk/chat``: the endpoint ``useChat`` (Vercel AI SDK 7) talks to unchanged.

The chat id is a thread (``app/dialects/conversation.py``). ``POST /ai-sdk/chat`` posts the
chat's last user message to it and streams the run that carries it as the SDK's UI message
stream (``app/dialects/ai_sdk/projector.py``); with ``trigger: "regenerate-message"`` the new
run replaces the thread's last reply (``RunRequest.replaces``: the old run stays, its messages
leave the history). ``GET /ai-sdk/chat/{chat_id}/stream`` is the transport's reconnect
(``useChat({resume: true})``): the thread's active run replayed from seq 1 out of the stored
log, then live, or ``204`` when none is active (the SDK then stays idle).
``GET /ai-sdk/chat/{chat_id}/messages`` is the chat as ``UIMessage[]``
(``app/dialects/ai_sdk/history.py``), for ``useChat({messages})`` after a reload. Errors are
plain text (``app.api.errors``): the SDK shows the body as ``error.message``.
Closing the stream (the SDK's ``stop()``) leaves the run running unless the request set
``cancel_on_disconnect``; steer, follow up or cancel it through ``/runs/{run_id}/...`` with the
``run_id`` of the message metadata.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Request, Response
from sse_starlette import EventSourceResponse

from app.api import control
from app.api.auth import Principal
from app.api.errors import ApiError, documented_text
from app.api.pipeline import submit
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.events import parse_seq
from app.api.routes.strict_json import StrictJsonRoute
from app.api.services import Services
from app.api.stream_limits import streaming
from app.delivery.sse import EventStreamResponse
from app.dialects.ai_sdk.answers import answers
from app.dialects.ai_sdk.history import chat_messages, client_tools
from app.dialects.ai_sdk.projector import HEADERS, UIMessageProjector, chunk_frame
from app.dialects.ai_sdk.request import ChatRequest, to_messages
from app.dialects.attachments import ai_sdk_names
from app.dialects.conversation import CHAT_ID, active_run, last_run, turn
from app.dialects.tail import poll_seconds, projected_frames
from app.store.contract import Backend
from app.store.records import RunRecord

router = APIRouter(tags=["ai-sdk"], route_class=StrictJsonRoute)
_STREAM: dict[int | str, dict[str, Any]] = {200: {"content": {"text/event-stream": {}},
                 "description": "the AI SDK UI message stream (x-vercel-ai-ui-message-stream: v1)"}}


def ui_stream(backend: Backend, record: RunRecord, *, poll: float, after: int = 0,
              cancel_on_disconnect: bool = False, head: bytes = b"",
              continues: bool = False) -> EventStreamResponse:
    """The run's log projected as a UI message stream, with the protocol's headers
    (``continues``: an answer's, after the park that ended the previous response)."""
    projector = UIMessageProjector(client_tools(record),
                                   continues_after=after if continues else None)
    frames = projected_frames(backend, record.id, projector, after=after, poll=poll,
                              cancel_on_disconnect=cancel_on_disconnect)
    response = EventStreamResponse(_after(head, frames) if head else frames)
    response.headers.update(HEADERS)
    return response


async def _after(head: bytes, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield head
    async for frame in frames:
        yield frame


async def _answer_run(body: ChatRequest, svc: Services, who: Principal) -> Response:
    """The chat's waiting run takes the answers of the last message, all or none; the rest of
    the run streams as the continuation of that message (``start`` with the same id)."""
    found = answers(body.messages[-1], f"messages[{len(body.messages) - 1}]")
    record = await active_run(svc.backend, who, body.id)
    if record is None or record.status != "requires_action":
        raise ApiError(409, "not_waiting", "the chat has no run waiting for an answer")
    state = await svc.backend.parked_state(record.id)
    waiting = {c["tool_call_id"]: c["kind"] for c in (state.calls if state else [])
               if state is not None and c["tool_call_id"] not in state.decisions}
    taken = [a for a in found if waiting.get(a.tool_call_id) == a.kind]
    if not taken:
        raise ApiError(409, "unknown_call", "the last message answers no call the run waits "
                       "for", "messages")
    await control.answer(svc, who, record.id, taken)
    meta = {"run_id": record.id, "events_url": f"/runs/{record.id}/events"}
    head = chunk_frame(record.last_seq, {"type": "start", "messageId": record.id,
                                         "messageMetadata": meta})
    return ui_stream(svc.backend, record, poll=poll_seconds(svc.settings.sse_ping_seconds),
                     after=record.last_seq, head=head, continues=True,
                     cancel_on_disconnect=body.cancel_on_disconnect)


def _wire_name(last: int, parts: Any) -> Callable[[str], str]:
    """The request's name of a pipeline field: the input is the last UI message's parts."""
    return ai_sdk_names(last, parts if isinstance(parts, list) else [])


@router.post("/ai-sdk/chat", operation_id="aiSdkChat",
             response_class=EventSourceResponse,
             responses={**_STREAM, **documented_text(400, 401, 403, 409, 413, 415, 422, 503)})
async def chat(body: ChatRequest, svc: ServicesDep, who: PrincipalDep,
               request: Request) -> Response:
    """Post the chat's last user message to its thread; stream the run that carries it as UI
    message chunks. A last message of the assistant's answers the chat's waiting run
    (``app/dialects/ai_sdk/answers.py``). An end user's stream is counted before anything
    is posted (``app.api.stream_limits``)."""
    return await streaming(request, _chat(body, svc, who))


async def _chat(body: ChatRequest, svc: Services, who: Principal) -> Response:
    if body.messages[-1].get("role") == "assistant":
        return await _answer_run(body, svc, who)
    prompt, system = to_messages(body.messages)
    options, set_fields = body.run_options(), body.options_set()
    if system and not options.get("system"):  # the page's system messages set it too
        options["system"], set_fields = system, set_fields | {"system"}
    replaces = await _replaced(svc, who, body) if body.trigger == "regenerate-message" else None
    done = await submit(svc, turn(who, body.id, prompt, options,
                                  _wire_name(len(body.messages) - 1,
                                             body.messages[-1].get("parts")), agent=body.agent,
                                  set_fields=set_fields, replaces=replaces))
    record = await svc.backend.get_run(done.run_id)
    if record is None:
        raise ApiError(404, "run_not_found", f"no run {done.run_id}")
    return ui_stream(svc.backend, record, poll=poll_seconds(svc.settings.sse_ping_seconds),
                     cancel_on_disconnect=body.cancel_on_disconnect)


async def _replaced(svc: Services, who: Principal, body: ChatRequest) -> str | None:
    """The reply a ``regenerate-message`` replaces: the chat's last run (``messageId``, when
    sent, must name it: 409 ``not_last_reply``); None for a chat with no run yet."""
    last = await last_run(svc.backend, who, body.id)
    if last is not None and body.messageId is not None and body.messageId != last:
        raise ApiError(409, "not_last_reply", f"messageId: {body.messageId} is not the chat's "
                       "last reply: only the last reply is regenerated", "messageId")
    return last


@router.get("/ai-sdk/chat/{chat_id}/messages", operation_id="aiSdkChatMessages",
            responses={200: {"description": "the chat as UIMessage[] (useChat({messages}))",
                             "content": {"application/json": {"schema": {
                                 "type": "array", "items": {"type": "object"}}}}},
                       **documented_text(401, 404, 503)})
async def messages(chat_id: str, svc: ServicesDep, who: PrincipalDep) -> Response:
    """The chat's messages in the form ``useChat`` keeps: each user message under the
    client's own id, each reply an assistant message (id: its run id) with its tool parts in
    their final states and its metadata; ``[]`` for a chat with no messages yet."""
    if not re.fullmatch(CHAT_ID, chat_id):
        raise ApiError(404, "not_found", "no such chat")
    found = await chat_messages(svc.backend, who, chat_id)
    return Response(orjson.dumps(found), media_type="application/json",
                    headers={"Cache-Control": "no-store"})


@router.get("/ai-sdk/chat/{chat_id}/stream", operation_id="aiSdkResumeChat",
             response_class=EventSourceResponse,
            responses={**_STREAM, 204: {"description": "the chat has no active run"},
                       **documented_text(401, 404, 422, 503)})
async def resume(chat_id: str, svc: ServicesDep, who: PrincipalDep,
                 last_event_id: Annotated[str | None, Header()] = None) -> Response:
    """The chat's active run: replayed from its start (or after ``Last-Event-ID``), then live;
    ``204`` when the chat has none."""
    if not re.fullmatch(CHAT_ID, chat_id):
        raise ApiError(404, "not_found", "no such chat")
    after = parse_seq(last_event_id, "Last-Event-ID")
    record = await active_run(svc.backend, who, chat_id)
    if record is None:
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    return ui_stream(svc.backend, record, poll=poll_seconds(svc.settings.sse_ping_seconds),
                     after=after)
