"""The runner's side of parked runs: park a run whose loop stopped to wait for people, and
build the gate of a run a worker continues (with the answers the store holds).

Timeline::

    loop ─ picks wait ─ approval_requested … ─ outcome.parked ─▶ park(): flush events and
    checkpoint, ParkingStore.park (no worker, no job, no lease: requires_action)
    … minutes or days …
    decide / steer / cancel / timeout ─▶ queued ─▶ any worker: gate with the answers (or
    ``expired``), cancel pre-set, the loop resumes from the checkpoint and runs the picks
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from app.engine.approvals import (
    ApprovalGate,
    WaitingCall,
    add_client_tools,
    decision_from_json,
    decision_json,
    gate_for,
)
from app.engine.nested import read_replay
from app.store.contract import Backend
from app.store.records import Claim, ParkedState, RunRecord, now
from app.worker.sink import EventSink, retrying
from tool_registry import Menu, Registry


def expiry_note(seconds: float) -> str:
    """The result of a pick nobody answered within ``approval_timeout``."""
    return (f"Approval timed out: nobody answered within {seconds:g} s (the run's "
            "approval_timeout), so this tool call was not run.")


async def run_gate(backend: Backend, record: RunRecord, registry: Registry, menu: Menu,
                   claim: Claim) -> ApprovalGate:
    """The run's gate (client tools put on ``menu``), with the stored answers on a resume
    (``carried`` ones too: the earlier answers a nested park kept)."""
    req = record.request
    add_client_tools(menu, list(req.get("client_tools") or []))
    gate = gate_for(req, registry) or ApprovalGate()  # a tool's nested loop may still ask
    if not claim.resumed:
        return gate
    state = await retrying(lambda: backend.parked_state(record.id))
    if state is not None:
        answers = {**state.carried, **state.decisions}
        gate.decisions = {k: decision_from_json(v) for k, v in answers.items()}
        if state.expired:
            gate.expired = expiry_note(float(req.get("approval_timeout") or 0))
            gate.expired_ids = frozenset(c["tool_call_id"] for c in state.calls)
    return gate


async def woken(backend: Backend, record: RunRecord, claim: Claim) -> ParkedState | None:
    """The parking a claimed run was woken from (None: a new run, or a crash resume)."""
    if not claim.resumed or record.status != "queued":
        return None
    return await retrying(lambda: backend.parked_state(record.id))


def count_wait(record: RunRecord, parked: ParkedState, sink: EventSink) -> None:
    """Add the wait just over to the run's ``parked_seconds`` (its deadline moves by it)."""
    record.parked_seconds += max(0.0, now() - parked.parked_at)
    sink.set_fields(parked_seconds=record.parked_seconds)


async def preset_cancel(backend: Backend, claim: Claim, record: RunRecord,
                        abort: asyncio.Event) -> None:
    """A run whose cancel was asked before it started (queued), or a resumed one (a parked
    run woken by it) stops before its first step, instead of when the cancel watcher first
    answers: a run cancelled while queued never calls its model."""
    if record.cancel_requested or (
            claim.resumed and await retrying(lambda: backend.cancel_requested(claim.run_id))):
        abort.set()


async def park(backend: Backend, claim: Claim, record: RunRecord, sink: EventSink,
               calls: list[WaitingCall], gate: ApprovalGate | None) -> None:
    """Flush what the loop wrote, then let go of the run until its picks are answered. A
    nested park keeps the answers given so far (``carried``): the turn whose call runs the
    nested loop is finished again, and its other picks must not be asked twice."""
    await sink.close()
    timeout = record.request.get("approval_timeout")
    deadline = now() + float(timeout) if timeout else None
    stored = [dataclasses.asdict(c) for c in calls]
    carried = {k: decision_json(d) for k, d in gate.decisions.items()} if (
        gate is not None and any(c.depth for c in calls)) else {}
    await retrying(lambda: backend.park(claim.run_id, claim.attempt, stored, deadline,
                                        carried))


async def attach_replay(backend: Backend, run_id: str, woken: ParkedState | None,
                        kwargs: dict[str, Any]) -> None:
    """A run woken from a nested park: its loop config gets the nested loops the log holds,
    and its resume point the depth-0 calls already started (``app.engine.nested``)."""
    if woken is None or not any(c.get("depth") for c in woken.calls):
        return
    waiting = [WaitingCall(**c) for c in woken.calls]
    replay = await retrying(lambda: read_replay(backend, run_id, waiting))
    kwargs["config"].replay = replay
    resume = kwargs.get("resume")
    if resume is not None:
        resume.started_calls = frozenset(replay.top_open)
