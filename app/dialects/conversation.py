"""The seam between a toolkit's conversation and our threads.

A toolkit names a conversation (the AI SDK's chat ``id``, AG-UI's ``threadId``); that id is a
thread of the store. The thread's id is derived from the tenant and the chat id
(``chat_thread_id``), so no lookup table is kept: a chat's first request creates the thread in
the same atomic step as its post (``RunRequest.new_thread``; of two racing first requests one
creates it, both post to it), and a request the pipeline refuses creates nothing. Later
requests find it, on either backend and on a Cluster (it is an ordinary thread id, its keys in
its own slot). Both dialects map a chat id to the same thread, so a chat started through one
can be resumed through the other.

Each request posts only the conversation's new user message (``turn``): the thread's history
is what the model sees, and the messages the client sent before its last one are not used (the
server's copy is the conversation). A message sent while the thread is busy follows
``multitask`` (default ``enqueue``: a follow-up of the active run). ``active_run`` is the run
a reconnect resumes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from app.api.auth import Principal
from app.api.checks import validation_to_api
from app.api.options import RunOptions
from app.api.pipeline import RunRequest
from app.store.contract import Backend
from app.store.records import TERMINAL, RunRecord
from app.store.thread_records import ThreadRecord
from app.store.threads import settled

CHAT_ID = r"^[A-Za-z0-9_-]{1,128}$"
"""What a chat (or AG-UI thread) id may be."""
CHAT_ID_KEY = "chat_id"
"""The run (and thread) metadata key naming the conversation's chat id."""
TITLE_KEY = "title"
"""The thread metadata key a toolkit's chat is titled by: its first message's first line
(at most ``TITLE_MAX`` characters), set when the chat's first request creates the thread."""
TITLE_MAX = 80


def chat_thread_id(tenant: str, chat_id: str, subject: str | None = None) -> str:
    """The thread of a tenant's chat (an end user's: of that user): a digest of all of them
    (another tenant's or user's chat of the same id is another thread)."""
    who = tenant if subject is None else f"{tenant}\0user\0{subject}"
    digest = hashlib.sha256(f"{who}\0{chat_id}".encode()).hexdigest()
    return f"thr_{digest[:32]}"


def turn(principal: Principal, chat_id: str, prompt: dict[str, Any], options: dict[str, Any],
         rename: Callable[[str], str], *, agent: str | None = None,
         set_fields: frozenset[str] = frozenset(), replaces: str | None = None) -> RunRequest:
    """The run request for the chat's new user message ``prompt``: ``options`` are run
    options (``RunOptions`` fields; ``set_fields`` those the caller set), the chat's thread is
    created with the post if absent (the caller's if an end user). A malformed option is a 422
    in the door's names (``rename``)."""
    metadata = {**(options.get("metadata") or {}), CHAT_ID_KEY: chat_id}
    try:
        run_options = RunOptions.model_validate({**options, "metadata": metadata})
    except ValidationError as exc:
        raise validation_to_api(exc, "").renamed(rename) from None
    thread_id = chat_thread_id(principal.tenant, chat_id, principal.subject)
    now = time.time()
    thread = ThreadRecord(id=thread_id, tenant=principal.tenant, created_at=now, updated_at=now,
                          metadata={CHAT_ID_KEY: chat_id, **_title(prompt)},
                          owner=principal.subject)
    return RunRequest(principal=principal, options=run_options, input=[prompt],
                      thread_id=thread_id, new_thread=thread, rename=rename, agent=agent,
                      set_fields=set_fields, replaces=replaces)


def _title(prompt: dict[str, Any]) -> dict[str, str]:
    """``{"title": ...}`` of a chat's first message (its text's first line), else nothing."""
    content = prompt.get("content")
    text = content if isinstance(content, str) else " ".join(
        str(b.get("text", "")) for b in content or [] if isinstance(b, dict)
        and b.get("type") == "text")
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    if not line:
        return {}
    return {TITLE_KEY: line if len(line) <= TITLE_MAX else line[:TITLE_MAX - 1] + "…"}


async def last_run(backend: Backend, who: Principal, chat_id: str) -> str | None:
    """The id of the caller's chat's last run (None: no such chat, or no run yet)."""
    thread_id = chat_thread_id(who.tenant, chat_id, who.subject)
    record = await backend.get_thread(thread_id)
    if record is None or not who.sees(record.tenant, record.owner, thread_id):
        return None
    return record.runs[-1] if record.runs else None


async def active_run(backend: Backend, who: Principal, chat_id: str) -> RunRecord | None:
    """The caller's chat's active run (the one a reconnect resumes), if any."""
    thread_id = chat_thread_id(who.tenant, chat_id, who.subject)
    record = await backend.get_thread(thread_id)
    if record is None or not who.sees(record.tenant, record.owner, thread_id):
        return None
    record = await settled(backend, record)
    run_id = record.active_run or record.next_run
    run = await backend.get_run(run_id) if run_id else None
    return run if run is not None and run.status not in TERMINAL else None
