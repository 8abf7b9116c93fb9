"""The Thread object and its list summary from a stored thread, and the Run a thread post
answers with."""

from __future__ import annotations

from fastapi import Response

from app.api.auth import Authenticator, Principal
from app.api.run_view import rfc3339, run_object
from app.api.schemas import Run
from app.api.services import Services
from app.api.thread_schemas import MultitaskOutcome, Thread, ThreadSummary
from app.store.contract import Backend
from app.store.errors import RunNotFound
from app.store.thread_records import PostOutcome, ThreadRecord

STATUS = {"started": 201, "interrupted": 201, "queued": 202, "steered": 202}
"""HTTP status of a post's answer by its action (an idempotent replay is 200)."""


def thread_events_url(thread_id: str) -> str:
    """Where the thread's event stream is."""
    return f"/threads/{thread_id}/events"


def _times(record: ThreadRecord) -> tuple[str, str]:
    created, updated = rfc3339(record.created_at), rfc3339(record.updated_at)
    assert created is not None and updated is not None
    return created, updated


async def thread_object(backend: Backend, record: ThreadRecord, auth: Authenticator) -> Thread:
    """The API view of ``record`` with its conversation and a fresh stream token."""
    messages = await backend.thread_messages(record.id)
    created, updated = _times(record)
    return Thread(id=record.id, status=record.status, created_at=created, updated_at=updated,
                  metadata=dict(record.metadata), messages=messages, runs=list(record.runs),
                  active_run=record.active_run, next_run=record.next_run,
                  events_url=thread_events_url(record.id),
                  stream_token=auth.issue_token(record.id, record.tenant, owner=record.owner))


def thread_summary(record: ThreadRecord, auth: Authenticator) -> ThreadSummary:
    """A thread as ``GET /threads`` lists it (no store read: the record has it all)."""
    created, updated = _times(record)
    return ThreadSummary(id=record.id, status=record.status, created_at=created,
                         updated_at=updated, metadata=dict(record.metadata),
                         run_count=len(record.runs),
                         last_run=record.runs[-1] if record.runs else None,
                         active_run=record.active_run, next_run=record.next_run,
                         events_url=thread_events_url(record.id),
                         stream_token=auth.issue_token(record.id, record.tenant,
                                                       owner=record.owner))


async def answer_post(svc: Services, who: Principal, outcome: PostOutcome,
                      response: Response) -> Run:
    """The Run that carries a posted message, saying what the message did (status 201 a new
    run, 202 queued into an existing one, 200 an idempotent replay)."""
    response.status_code = 200 if outcome.repeat else STATUS[outcome.action]
    response.headers["Location"] = f"/runs/{outcome.run_id}"
    record = await svc.backend.get_run(outcome.run_id)
    if record is None:  # an idempotent replay of a post whose run has expired since
        raise RunNotFound(outcome.run_id)
    run = await run_object(svc.backend, record)
    run.stream_token = svc.auth.issue_token(run.id, who.tenant, owner=record.owner)
    run.multitask = MultitaskOutcome(action=outcome.action,  # type: ignore[arg-type]
                                     queued=outcome.queued, message_ids=outcome.message_ids,
                                     repeat=outcome.repeat)
    return run
