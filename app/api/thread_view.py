"""The Thread object (``app.api.thread_schemas.Thread``) from a stored thread, and the Run a
thread post answers with."""

from __future__ import annotations

from app.api.auth import Authenticator
from app.api.run_view import rfc3339, run_object
from app.api.schemas import Run
from app.api.thread_schemas import MultitaskOutcome, Thread
from app.store.contract import TERMINAL, Backend, RunNotFound
from app.store.thread_records import PostOutcome, ThreadRecord
from app.store.threads import threads


def thread_events_url(thread_id: str) -> str:
    """Where the thread's event stream is."""
    return f"/threads/{thread_id}/events"


async def settled(backend: Backend, record: ThreadRecord) -> ThreadRecord:
    """``record``, after settling it if its active run has ended (a worker that died between
    a run's end and its settle leaves that to the next reader)."""
    if record.active_run is None:
        return record
    run = await backend.get_run(record.active_run)
    if run is not None and run.status not in TERMINAL:
        return record
    store = threads(backend)
    await store.settle_thread(record.id)
    return await store.get_thread(record.id) or record


async def thread_object(backend: Backend, record: ThreadRecord, auth: Authenticator) -> Thread:
    """The API view of ``record`` with its conversation and a fresh stream token."""
    messages = await threads(backend).thread_messages(record.id)
    created, updated = rfc3339(record.created_at), rfc3339(record.updated_at)
    assert created is not None and updated is not None
    return Thread(id=record.id, status=record.status, created_at=created, updated_at=updated,
                  metadata=dict(record.metadata), messages=messages, runs=list(record.runs),
                  active_run=record.active_run, next_run=record.next_run,
                  events_url=thread_events_url(record.id),
                  stream_token=auth.issue_token(record.id, record.tenant))


async def post_answer(backend: Backend, outcome: PostOutcome, auth: Authenticator,
                      tenant: str) -> Run:
    """The Run that carries a posted message, saying what the message did."""
    record = await backend.get_run(outcome.run_id)
    if record is None:  # an idempotent replay of a post whose run has expired since
        raise RunNotFound(outcome.run_id)
    run = await run_object(backend, record)
    run.stream_token = auth.issue_token(run.id, tenant)
    run.multitask = MultitaskOutcome(action=outcome.action,  # type: ignore[arg-type]
                                     queued=outcome.queued, message_ids=outcome.message_ids,
                                     repeat=outcome.repeat)
    return run
