"""The one control path: every action on a run goes through here, whatever door it came in
by (the per-run endpoints, a thread's endpoints, the AI SDK and AG-UI answers). Each is one
atomic store step that knows the run's state; docs/events.md has the state × action table::

    cancel    queued: ends at its start · running: the loop aborts · parked: woken, ends
              cancelled · ended: no-op
    steer     queued: taken before the first model call · running: after the running tool,
              the turn's other picks skipped · parked: woken, its picks skipped · ended: 409
    follow_up queued, running, parked: taken when the loop would stop · ended: 409
    answer    parked: recorded, all answers of a request or none; the last one wakes it ·
              otherwise 409 not_waiting
    delete a thread: its active run is cancelled as above; a waiting one never starts

(A thread's ``multitask`` post is the pipeline's: its interrupt and steer are the same store
steps as cancel and steer here.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from app.api.attachment_checks import rules_for
from app.api.auth import Principal
from app.api.checks import user_message
from app.api.errors import ApiError, queue_full
from app.api.pipeline import thread_not_found
from app.api.run_view import load_run
from app.api.services import Services
from app.engine.approvals import Decision, add_client_tools, decision_json
from app.engine.events import ApprovalDecided
from app.engine.queues import QueuedMessage, QueueKind
from app.store.errors import DecisionRefused, QueueFull, RunEnded, RunNotFound
from app.store.ids import is_thread_id, new_message_id
from app.store.records import REQUIRES_ACTION, TERMINAL, Answer, RunRecord
from app.store.thread_records import ThreadRecord
from app.store.threads import settled
from app.telemetry import metrics
from app.telemetry.logs import bind
from tool_registry import ArgumentError, Menu

AnswerKind = Literal["approval", "client_tool"]
PARK_WAIT = 5.0
"""Seconds an answer that raced its run's park waits for it (``_once_parked``)."""
PAGE = 200
_REQUESTS = frozenset({"approval_requested", "client_tool_requested"})


@dataclass(slots=True, frozen=True)
class AnswerIn:
    """One answer to a parked run's pick, as a door read it: ``field`` names where it came
    from (errors about it name that field)."""

    tool_call_id: str
    kind: AnswerKind
    decision: Decision
    field: str = "tool_call_id"


async def load_thread(svc: Services, principal: Principal, thread_id: str) -> ThreadRecord:
    """The caller's thread, settled; 404 for a missing one or another tenant's."""
    if not is_thread_id(thread_id):
        raise thread_not_found(thread_id)
    record = await svc.backend.get_thread(thread_id)
    if record is None or not principal.sees(record.tenant, record.owner, thread_id):
        raise thread_not_found(thread_id)
    return await settled(svc.backend, record)


async def cancel(svc: Services, principal: Principal, run_id: str) -> RunRecord:
    """Abort the run (idempotent; a no-op once it has ended); a parked run is woken to end."""
    record = await load_run(svc.backend, run_id, principal)
    if record.status not in TERMINAL:
        with bind(run_id=run_id, tenant=principal.tenant):
            await svc.backend.request_cancel(run_id)
    return record


def run_ended(run_id: str) -> ApiError:
    """409 ``run_ended``: the run takes no more messages."""
    return ApiError(409, "run_ended", f"run {run_id} has ended (or is ending): the message "
                    "was not queued")


async def enqueue(svc: Services, principal: Principal, run_id: str, kind: QueueKind,
                  content: str | list[dict[str, Any]]) -> tuple[str, int]:
    """Queue a steering or follow-up message: ``(message id, position)``. A steer wakes a
    parked run (its picks are skipped); 409 ``run_ended`` once the run ends or is ending,
    ``queue_full`` while it holds ``max_queued_messages`` waiting."""
    record = await load_run(svc.backend, run_id, principal)
    if record.status in TERMINAL:
        raise run_ended(run_id)
    message = user_message(content, rules_for(svc, record.model))
    item = QueuedMessage(id=new_message_id(), message=message)
    with bind(run_id=run_id, tenant=principal.tenant):
        try:  # the store checks again, atomically with the push, its event and the wake
            position = await svc.backend.enqueue(run_id, kind, item,
                                                 limit=svc.settings.max_queued_messages)
        except RunEnded as exc:
            raise run_ended(run_id) from exc
        except QueueFull as exc:
            raise queue_full(exc) from exc
    metrics.QUEUE_DEPTH.labels(kind=kind).inc()
    return item.id, position


async def answer(svc: Services, principal: Principal, run_id: str,
                 answers: Sequence[AnswerIn]) -> RunRecord:
    """Record the answers to a parked run's picks, all or none (409 ``not_waiting``,
    ``unknown_call``, ``wrong_kind``, ``already_decided``; 422 for edited arguments the tool
    refuses or two answers to one call). The last answer wakes the run."""
    record = await _once_parked(svc, await load_run(svc.backend, run_id, principal),
                                {a.tool_call_id for a in answers})
    if record.status != REQUIRES_ACTION:
        raise ApiError(409, "not_waiting", f"run {run_id} is {record.status}, not waiting "
                       "for a decision")
    state = await svc.backend.parked_state(run_id)
    calls = {c["tool_call_id"]: c for c in (state.calls if state else [])}
    stored: list[Answer] = []
    seen: dict[str, str] = {}
    for given in answers:
        call = _waiting_call(calls, given)
        if given.tool_call_id in seen:
            raise ApiError(422, "validation_error", f"{given.field}: answers call "
                           f"{given.tool_call_id} again (already answered by "
                           f"{seen[given.tool_call_id]})", given.field)
        seen[given.tool_call_id] = given.field
        if given.decision.arguments is not None:
            _validate_arguments(svc, record, call["tool_name"], given)
        stored.append(Answer(given.tool_call_id, decision_json(given.decision), ApprovalDecided(
            tool_call_id=given.tool_call_id, decision=given.decision.kind,
            reason=given.decision.reason, args=given.decision.arguments,
            depth=int(call.get("depth") or 0),
            parent_tool_call_id=call.get("parent_tool_call_id"))))
    with bind(run_id=run_id, tenant=principal.tenant):
        try:
            await svc.backend.decide(run_id, stored)
        except DecisionRefused as exc:
            fields = {a.tool_call_id: a.field for a in answers}
            raise ApiError(409, exc.code, str(exc),
                           fields.get(exc.call_id or "", "tool_call_id")) from exc
    return await load_run(svc.backend, run_id, principal)


async def _once_parked(svc: Services, record: RunRecord, call_ids: set[str]) -> RunRecord:
    """The run as it is once parked, for an answer that raced the park: a client acting on
    ``approval_requested`` / ``client_tool_requested`` the moment it arrives can reach here
    while the worker is still writing the park (the events go out first, the status after).
    Only a run whose latest events ask for one of ``call_ids``, not yet answered, is waited
    for (woken by the
    park's note, at most ``PARK_WAIT`` s); any other answers at once."""
    if record.status not in ("queued", "running") or not call_ids:
        return record
    tail = await svc.backend.read_events(record.id, max(0, record.last_seq - PAGE), PAGE)
    asked = {_call_id(e.data) for e in tail if e.type in _REQUESTS}
    asked -= {_call_id(e.data) for e in tail if e.type == "approval_decided"}
    if not asked & call_ids:
        return record
    loop = asyncio.get_running_loop()
    deadline, last = loop.time() + PARK_WAIT, tail[-1].seq if tail else record.last_seq
    while record.status in ("queued", "running") and loop.time() < deadline:
        events = await svc.backend.wait_events(record.id, last, deadline - loop.time(),
                                               parked=True)
        last = events[-1].seq if events else last
        record = await svc.backend.get_run(record.id) or record
    return record


def _call_id(data: bytes) -> str | None:
    value = orjson.loads(data).get("tool_call_id")
    return value if isinstance(value, str) else None


def _waiting_call(calls: dict[str, dict[str, Any]], given: AnswerIn) -> dict[str, Any]:
    call = calls.get(given.tool_call_id)
    if call is None:
        raise ApiError(409, "unknown_call", f"the run waits for no call {given.tool_call_id}",
                       given.field)
    if call["kind"] != given.kind:
        other = "tool_results" if call["kind"] == "client_tool" else "approvals"
        raise ApiError(409, "wrong_kind", f"call {given.tool_call_id} is answered at "
                       f"/runs/{{id}}/{other}", given.field)
    return call


def _validate_arguments(svc: Services, record: RunRecord, tool_name: str,
                        given: AnswerIn) -> None:
    field = "arguments" if given.field == "tool_call_id" else f"{given.field}.arguments"
    menu = Menu(tools=dict(svc.registry.tools))
    add_client_tools(menu, list(record.request.get("client_tools") or []))
    tool = menu.tools.get(tool_name)
    if tool is None:
        raise ApiError(409, "unknown_call", f"tool {tool_name} is no longer known", field)
    try:
        tool.validate(given.decision.arguments or {})
    except ArgumentError as exc:
        raise ApiError(422, "validation_error", f"{field}: {exc}", field) from exc


async def withdraw(svc: Services, principal: Principal, run_id: str, message_id: str) -> None:
    """Withdraw a queued message the loop has not taken (404 ``message_not_found``, 409
    ``message_taken`` / ``run_ended``)."""
    await load_run(svc.backend, run_id, principal)
    try:
        kind = await svc.backend.withdraw(run_id, message_id)
    except RunNotFound as exc:
        raise ApiError(404, "message_not_found", f"no queued message {message_id}") from exc
    except RunEnded as exc:
        raise ApiError(409, "run_ended", f"run {run_id} has ended: its queue stays as it "
                       "was") from exc
    metrics.QUEUE_DEPTH.labels(kind=kind).dec()


async def delete_thread(svc: Services, principal: Principal, thread_id: str) -> None:
    """Delete the thread: its active run is cancelled (woken if parked, so a worker ends it);
    a run waiting to start never starts. The runs stay readable until they expire."""
    await load_thread(svc, principal, thread_id)
    await svc.backend.delete_thread(thread_id)

