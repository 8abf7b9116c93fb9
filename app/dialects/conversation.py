"""The seam between a toolkit's conversation and our threads.

A toolkit names a conversation (the AI SDK's chat ``id``, AG-UI's ``threadId``); that id is a
thread of ``app/threads``. The thread's id is derived from the tenant and the chat id
(``chat_thread_id``), so no lookup table is kept: the first request of a chat creates the
thread (``create_thread_if_absent``: one atomic step, so two racing first requests share one
thread), later ones find it, on either backend and on a Cluster (it is an ordinary thread id,
its keys in its own slot). Both dialects map a chat id to the same thread, so a chat started
through one can be resumed through the other.

Each request posts only the conversation's new user message as a thread run
(``post_turn``): the thread's history is what the model sees, and the messages the client sent
before its last one are not used (the server's copy is the conversation). A message sent
while the thread is busy follows ``multitask`` (default ``enqueue``: a follow-up of the active
run). ``active_run`` is the run a reconnect resumes.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from app.api.schemas import CreateRun
from app.api.thread_posts import post_message
from app.api.thread_view import settled
from app.process.services import Services
from app.store.contract import TERMINAL, RunRecord
from app.store.thread_records import PostOutcome, ThreadRecord
from app.store.threads import threads

CHAT_ID_KEY = "chat_id"
"""The run (and thread) metadata key naming the conversation's chat id."""


def chat_thread_id(tenant: str, chat_id: str) -> str:
    """The thread of a tenant's chat: a digest of both (another tenant's chat of the same id
    is another thread)."""
    digest = hashlib.sha256(f"{tenant}\0{chat_id}".encode()).hexdigest()
    return f"thr_{digest[:32]}"


async def chat_thread(svc: Services, tenant: str, chat_id: str) -> str:
    """The chat's thread id, creating the thread on first use."""
    thread_id = chat_thread_id(tenant, chat_id)
    now = time.time()
    record = ThreadRecord(id=thread_id, tenant=tenant, created_at=now, updated_at=now,
                          metadata={CHAT_ID_KEY: chat_id})
    await threads(svc.backend).create_thread_if_absent(record)
    return thread_id


def turn_body(chat_id: str, prompt: dict[str, Any], options: dict[str, Any]) -> CreateRun:
    """The thread post for the new user message ``prompt``; ``options`` are ``POST /runs``
    fields (model, tools, multitask, ...)."""
    options = dict(options)
    metadata = {**(options.pop("metadata", None) or {}), CHAT_ID_KEY: chat_id}
    return CreateRun(input=[prompt], metadata=metadata,
                     **{k: v for k, v in options.items() if v is not None})


async def post_turn(svc: Services, tenant: str, chat_id: str, body: CreateRun) -> PostOutcome:
    """Post the turn to the chat's thread (400/404/409/422 ``ApiError`` as for
    ``POST /threads/{id}/runs``)."""
    thread_id = await chat_thread(svc, tenant, chat_id)
    return await post_message(svc, tenant, thread_id, body, None)


async def active_run(svc: Services, tenant: str, chat_id: str) -> RunRecord | None:
    """The chat's active run (the one a reconnect resumes), if any."""
    record = await threads(svc.backend).get_thread(chat_thread_id(tenant, chat_id))
    if record is None or record.tenant != tenant:
        return None
    record = await settled(svc.backend, record)
    run_id = record.active_run or record.next_run
    run = await svc.backend.get_run(run_id) if run_id else None
    return run if run is not None and run.status not in TERMINAL else None
