"""The Run object (API.md) from a stored ``RunRecord``, its checkpoint and its queues."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from app.api.auth import Principal
from app.api.checks import input_messages
from app.api.schemas import PendingCall, QueueCounts, Run
from app.store.contract import Backend
from app.store.errors import RunNotFound
from app.store.ids import RUN_ID, thread_of_run
from app.store.records import REQUIRES_ACTION, RunRecord

USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
              "total_tokens")


def rfc3339(ts: float | None) -> str | None:
    """Epoch seconds → RFC 3339 UTC with milliseconds (None stays None)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def events_url(run_id: str) -> str:
    """Where the run's event stream is."""
    return f"/runs/{run_id}/events"


async def load_run(backend: Backend, run_id: str, who: Principal) -> RunRecord:
    """The caller's run; ``RunNotFound`` (404) for a missing run or one that is not theirs
    (another tenant's, another end user's)."""
    check_run_id(run_id)
    return owned(await backend.get_run(run_id), run_id, who)


def check_run_id(run_id: str) -> None:
    """``RunNotFound`` for an id no run can have (before the store is asked)."""
    if not RUN_ID.fullmatch(run_id):
        raise RunNotFound(run_id)


def owned(record: RunRecord | None, run_id: str, who: Principal) -> RunRecord:
    """``record`` if it exists and is the caller's, else ``RunNotFound`` (404, never 403)."""
    if record is None or not who.sees(record.tenant, record.owner, thread_of_run(run_id)):
        raise RunNotFound(run_id)
    return record


async def run_object(backend: Backend, record: RunRecord, *, fresh: bool = False) -> Run:
    """The API view of ``record``: input plus checkpointed messages, queue counts.
    ``fresh``: the run was just created, so it has neither (no store reads)."""
    if fresh:
        added: list[dict[str, object]] = []
        queue: dict[str, int] = {}
    else:
        added, queue = await asyncio.gather(backend.load_checkpoint(record.id),
                                            backend.queue_lengths(record.id))
    if not added and thread_of_run(record.id) and not fresh:  # not started: its input
        added = (await backend.thread_run_inputs(record.id))[1]
    messages = [*_context_messages(record), *added]
    created = rfc3339(record.created_at)
    assert created is not None
    return Run(
        id=record.id, status=record.status, model=record.model, created_at=created,
        started_at=rfc3339(record.started_at), ended_at=rfc3339(record.ended_at),
        stop_reason=record.stop_reason, error=record.error, result=record.result,
        output=record.output,
        usage={k: int(record.usage.get(k, 0)) for k in USAGE_KEYS}, messages=messages,
        metadata=dict(record.metadata),
        queue=QueueCounts(steer=queue.get("steer", 0), follow_up=queue.get("follow_up", 0)),
        events_url=events_url(record.id), thread_id=thread_of_run(record.id),
        agent=record.request.get("agent"), agent_version=record.request.get("agent_version"),
        pending=await pending_calls(backend, record))


async def pending_calls(backend: Backend, record: RunRecord) -> list[PendingCall]:
    """What a ``requires_action`` run waits for (the Run's ``pending``)."""
    if record.status != REQUIRES_ACTION:
        return []
    state = await backend.parked_state(record.id)
    if state is None:
        return []
    return [PendingCall(tool_call_id=c["tool_call_id"], tool_name=c["tool_name"],
                        args=c["args"], kind=c["kind"],
                        decided=c["tool_call_id"] in state.decisions,
                        depth=int(c.get("depth") or 0),
                        parent_tool_call_id=c.get("parent_tool_call_id"))
            for c in state.calls]


def _context_messages(record: RunRecord) -> list[dict[str, object]]:
    """The part of the input the loop does not re-add: a list input is the context the loop
    continues; a string input becomes the loop's prompt, which the checkpoint records."""
    value = record.request.get("input")
    if isinstance(value, str) or thread_of_run(record.id):  # a thread run's input: its prompts
        return []
    return input_messages(record.request)
