"""A chat in the form ``useChat`` keeps it: ``GET /ai-sdk/chat/{id}/messages`` → ``UIMessage[]``.

The chat's thread lists its runs in order; each run is its user message(s) and one assistant
message, as the live stream showed them::

    run ─┬─ its prompts (the user message_start events before its first reply; the run's
         │  stored input while it has not started) ─▶ user UIMessages, the client's own ids
         └─ its log, projected (``UIMessageProjector``) and built (``UIMessageBuilder``)
            ─▶ the assistant UIMessage (id: the run id), parked: ended as its stream was

A run whose reply was regenerated (``replaced_by``) is left out. The active run's reply is
there as far as it got: ``useChat({resume: true})`` then replays it into the same message.
"""

from __future__ import annotations

from typing import Any

import orjson

from app.api.auth import Principal
from app.delivery.log_pages import PAGE
from app.dialects.ai_sdk.message import UIMessageBuilder
from app.dialects.ai_sdk.projector import UIMessageProjector
from app.dialects.conversation import chat_thread_id
from app.store.contract import Backend
from app.store.records import REQUIRES_ACTION, RunRecord


async def chat_messages(backend: Backend, who: Principal, chat_id: str) -> list[dict[str, Any]]:
    """The chat's ``UIMessage[]`` (empty for a chat that has no thread yet)."""
    thread_id = chat_thread_id(who.tenant, chat_id, who.subject)
    thread = await backend.get_thread(thread_id)
    if thread is None or not who.sees(thread.tenant, thread.owner, thread_id):
        return []
    out: list[dict[str, Any]] = []
    for run_id in thread.runs:
        record = await backend.get_run(run_id)
        if record is None or record.replaced_by:
            continue
        events = await _log(backend, run_id)
        prompts = _prompts(events) or (await backend.thread_run_inputs(run_id))[1]
        out += [user_message(p, f"{run_id}-in-{n}") for n, p in enumerate(prompts)]
        out.append(assistant_message(record, events))
    return out


async def _log(backend: Backend, run_id: str) -> list[dict[str, Any]]:
    """Every event of the run, decoded."""
    events: list[dict[str, Any]] = []
    while page := await backend.read_events(run_id, len(events), PAGE):
        events += [orjson.loads(e.data) for e in page]
        if len(page) < PAGE:
            break
    return events


def _prompts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user messages the run started with (those before its first reply)."""
    out: list[dict[str, Any]] = []
    for event in events:
        if event.get("type") != "message_start" or event.get("depth"):
            continue
        message = event["message"]
        if message.get("role") != "user":
            break
        out.append(message)
    return out


def user_message(message: dict[str, Any], fallback_id: str) -> dict[str, Any]:
    """A stored user message as a user ``UIMessage`` (its client id, else ``fallback_id``)."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    return {"id": message.get("id") or fallback_id, "role": "user",
            "parts": [p for b in blocks if (p := _part(b)) is not None]}


def _part(block: dict[str, Any]) -> dict[str, Any] | None:
    """A user content block as a UI part: text, or a file (a data URL, or the block's URL)."""
    if block.get("type") == "text":
        return {"type": "text", "text": block.get("text", "")}
    mime = block.get("mime_type") or "application/octet-stream"
    url = block.get("url") or (f"data:{mime};base64,{block['data']}" if block.get("data")
                               else None)
    if url is None:
        return None
    part = {"type": "file", "mediaType": mime, "url": url}
    if block.get("name"):
        part["filename"] = block["name"]
    return part


def assistant_message(record: RunRecord, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's assistant ``UIMessage``, built from its log as the live stream built it."""
    projector = UIMessageProjector(client_tools(record))
    builder = UIMessageBuilder(record.id)
    for event in events:
        for chunk in projector.chunks(event):
            builder.feed(chunk)
    if record.status == REQUIRES_ACTION and projector.waits_on_client():
        for chunk in projector.pause_chunks():
            builder.feed(chunk)
    return builder.message


def client_tools(record: RunRecord | None) -> frozenset[str]:
    """The names of the run's client tools (their parts are not ``providerExecuted``)."""
    tools = (record.request.get("client_tools") or []) if record is not None else []
    return frozenset(str(t.get("name")) for t in tools if isinstance(t, dict))
