"""What the thread routes do: build a post from a request, post it, answer with the Run.

``POST /threads/{id}/runs`` and ``POST /runs`` with ``thread_id`` both end in ``post_message``.
The body is checked as for ``POST /runs`` (model, tools, timeout), and ``input`` must be user
messages: the thread holds the rest of the conversation.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from app.api.errors import ApiError
from app.api.run_requests import (
    check_model,
    check_timeout,
    check_tools,
    normalise_input,
    request_hash,
    stored_request,
)
from app.api.schemas import CreateRun
from app.engine.events import RunCreated, json_bytes
from app.process.services import Services
from app.store.contract import RunRecord
from app.store.ids import is_thread_id, new_thread_run_id
from app.store.thread_records import DEFAULT_MULTITASK, PostOutcome, ThreadNotFound, ThreadPost
from app.store.threads import threads
from app.telemetry import metrics
from providers.messages import UserMessage, message_adapter

STATUS = {"started": 201, "interrupted": 201, "queued": 202, "steered": 202}
"""HTTP status of a post's answer by its action (an idempotent replay is 200)."""


def thread_not_found(thread_id: str) -> ApiError:
    """404 for a missing thread (or another tenant's)."""
    return ApiError(404, "thread_not_found", f"no thread {thread_id}")


def check_thread_id(thread_id: str) -> None:
    """404 before the store is asked for an id no thread can have."""
    if not is_thread_id(thread_id):
        raise thread_not_found(thread_id)


def prompts_of(value: str | list[dict[str, Any]]) -> list[UserMessage]:
    """The posted user messages (422 naming ``input[i]...`` as for ``POST /runs``, and
    ``input[i].role`` for a message that is not the user's)."""
    normalised = normalise_input(value)
    if isinstance(normalised, str):
        return [UserMessage(content=normalised)]
    out = []
    for i, raw in enumerate(normalised):
        message = message_adapter.validate_python(raw)
        if not isinstance(message, UserMessage):
            raise ApiError(422, "validation_error", f"input[{i}].role: a thread takes user "
                           "messages only (the thread holds the conversation)",
                           f"input[{i}].role")
        out.append(message)
    return out


def build_post(svc: Services, tenant: str, thread_id: str, body: CreateRun,
               idempotency_key: str | None) -> ThreadPost:
    """The backend's ``ThreadPost`` from a checked request body."""
    if body.thread_id is not None and body.thread_id != thread_id:
        raise ApiError(422, "validation_error", "thread_id: differs from the thread in the "
                       "path", "thread_id")
    model = body.model or svc.default_model
    check_model(model, svc.resolve_provider)
    check_tools(body, registry=svc.registry, disabled=svc.settings.disabled_tool_list(),
                env=svc.env)
    check_timeout(body, svc.settings.run_timeout)
    prompts = prompts_of(body.input)
    request = stored_request(body, model)
    request["thread_id"] = thread_id
    candidate_id = new_thread_run_id(thread_id)
    candidate = RunRecord(id=candidate_id, tenant=tenant, model=model, created_at=time.time(),
                          metadata=dict(body.metadata), request=request)
    digest = request_hash({"tenant": tenant, "thread": thread_id,
                           "body": body.model_dump(mode="json")})
    return ThreadPost(tenant=tenant, multitask=body.multitask or DEFAULT_MULTITASK,
                      candidate=candidate, first_event=RunCreated(model=model),
                      prompts=[json_bytes(m) for m in prompts],
                      message_ids=[f"msg_{uuid.uuid4().hex}" for _ in prompts],
                      idempotency_key=idempotency_key, request_hash=digest)


async def post_message(svc: Services, tenant: str, thread_id: str, body: CreateRun,
                       idempotency_key: str | None) -> PostOutcome:
    """Post to the thread; 409 ``thread_busy`` for a rejected post, 404 for no thread."""
    check_thread_id(thread_id)
    post = build_post(svc, tenant, thread_id, body, idempotency_key)
    try:
        outcome = await threads(svc.backend).post_thread_run(thread_id, post)
    except ThreadNotFound as exc:
        raise thread_not_found(thread_id) from exc
    if outcome.action == "rejected":
        raise ApiError(409, "thread_busy", f"thread {thread_id} is busy with run "
                       f"{outcome.run_id} (multitask: reject)", "multitask",
                       headers={"Location": f"/runs/{outcome.run_id}"})
    if outcome.repeat:
        return outcome
    if outcome.action in ("started", "interrupted"):
        metrics.RUNS_CREATED.inc()
    if outcome.in_queue:
        kind = "steer" if outcome.action == "steered" else "follow_up"
        metrics.QUEUE_DEPTH.labels(kind=kind).inc(len(outcome.message_ids))
    return outcome
