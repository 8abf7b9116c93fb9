"""The seam between a toolkit's conversation and our runs.

A toolkit names a conversation (the AI SDK's chat ``id``, AG-UI's ``threadId``) and sends its
messages; ``conversation_run`` turns that into one ``POST /runs`` body, and ``start_run``
starts it exactly as ``POST /runs`` does. Until conversations are stored server-side (the
threads issue), the history comes from the request's own messages and a conversation's runs
are found by their ``chat_id`` metadata: ``latest_run`` is the one a reconnect resumes. When
threads land, these two functions are what changes.
"""

from __future__ import annotations

import time
from typing import Any

from app import metrics
from app.backends.base import RunRecord
from app.events import RunCreated
from app.routes.runs import new_run_id
from app.run_requests import check_model, check_timeout, check_tools, stored_request
from app.schemas import CreateRun
from app.services import Services

CHAT_ID_KEY = "chat_id"
"""The run metadata key naming the conversation a run belongs to."""


def conversation_run(chat_id: str, messages: list[dict[str, Any]],
                     options: dict[str, Any]) -> CreateRun:
    """The run that answers the last message of ``messages`` (the history before it is the
    context the loop continues). ``options`` are ``POST /runs`` fields (model, tools, ...)."""
    options = dict(options)
    metadata = {**(options.pop("metadata", None) or {}), CHAT_ID_KEY: chat_id}
    return CreateRun(input=messages, metadata=metadata,
                     **{k: v for k, v in options.items() if v is not None})


async def start_run(svc: Services, tenant: str, body: CreateRun) -> RunRecord:
    """Check and create the run as ``POST /runs`` does (400/422 ``ApiError`` on bad input)."""
    model = body.model or svc.default_model
    check_model(model, svc.resolve_provider)
    check_tools(body, registry=svc.registry, disabled=svc.settings.disabled_tool_list(),
                env=svc.env)
    check_timeout(body, svc.settings.run_timeout)
    record = RunRecord(id=new_run_id(), tenant=tenant, model=model, created_at=time.time(),
                       metadata=dict(body.metadata), request=stored_request(body, model))
    record, _ = await svc.backend.create_run(record, idempotency_key=None, request_hash="",
                                             first_event=RunCreated(model=model))
    metrics.RUNS_CREATED.inc()
    return record


async def latest_run(svc: Services, tenant: str, chat_id: str) -> RunRecord | None:
    """The conversation's newest run (the one a reconnect resumes), if any."""
    page = await svc.backend.list_runs(tenant, status=None, metadata={CHAT_ID_KEY: chat_id},
                                       limit=1, cursor=None)
    return page.runs[0] if page.runs else None
