"""Answers for a ``requires_action`` run: ``POST /runs/{id}/approvals`` (approve, with edited
arguments validated against the tool's schema, or deny with a reason) and
``POST /runs/{id}/tool_results`` (a client tool's result). Each answer is recorded atomically
with its ``approval_decided`` event; the last one wakes the run (any worker continues it).

409: the run does not wait (``not_waiting``: running, ended, or a cancel, steer or the timeout
won the race), the call is not one it waits for (``unknown_call``), it was answered already
(``already_decided``), or it waits at the other endpoint (``wrong_kind``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import ValidationError

from app.api.errors import ApiError, documented
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.strict_json import StrictJsonRoute
from app.api.run_view import load_run, run_object
from app.api.schemas import ApprovalIn, Run, ToolResultIn
from app.engine.approvals import Decision, add_client_tools
from app.engine.events import ApprovalDecided
from app.process.services import Services
from app.store.contract import RunRecord
from app.store.parking import DecisionRefused, ParkedState
from app.telemetry.logs import bind
from app.worker.parking import BLOCKS, decision_json
from providers.messages import ImageContent, TextContent
from tool_registry import ArgumentError, Menu

router = APIRouter(tags=["approvals"], route_class=StrictJsonRoute)
_ERRORS = documented(400, 401, 404, 409, 413, 415, 422, 503)


def _waiting_call(state: ParkedState | None, call_id: str, kind: str) -> dict[str, Any]:
    call = next((c for c in (state.calls if state else []) if c["tool_call_id"] == call_id),
                None)
    if call is None:
        raise ApiError(409, "unknown_call", f"the run waits for no call {call_id}",
                       "tool_call_id")
    if call["kind"] != kind:
        other = "tool_results" if call["kind"] == "client_tool" else "approvals"
        raise ApiError(409, "wrong_kind", f"call {call_id} is answered at "
                       f"/runs/{{id}}/{other}", "tool_call_id")
    return call


def _validate_arguments(svc: Services, record: RunRecord, tool_name: str,
                        arguments: dict[str, Any]) -> None:
    menu = Menu(tools=dict(svc.registry.tools))
    add_client_tools(menu, list(record.request.get("client_tools") or []))
    tool = menu.tools.get(tool_name)
    if tool is None:
        raise ApiError(409, "unknown_call", f"tool {tool_name} is no longer known", "arguments")
    try:
        tool.validate(arguments)
    except ArgumentError as exc:
        raise ApiError(422, "validation_error", f"arguments: {exc}", "arguments") from exc


async def decide_call(svc: Services, tenant: str, run_id: str, call_id: str, kind: str,
                      decision: Decision) -> Run:
    """Record one answer as the two endpoints do (also the dialects' way in)."""
    record = await load_run(svc.backend, run_id, tenant)
    state = await svc.backend.parked_state(run_id)
    if record.status != "requires_action":
        raise ApiError(409, "not_waiting", f"run {run_id} is {record.status}, not waiting "
                       "for a decision")
    call = _waiting_call(state, call_id, kind)
    if decision.arguments is not None:
        _validate_arguments(svc, record, call["tool_name"], decision.arguments)
    event = ApprovalDecided(tool_call_id=call_id, decision=decision.kind,
                            reason=decision.reason, args=decision.arguments,
                            depth=int(call.get("depth") or 0),
                            parent_tool_call_id=call.get("parent_tool_call_id"))
    with bind(run_id=run_id, tenant=tenant):
        try:
            await svc.backend.decide(run_id, call_id, decision_json(decision), event)
        except DecisionRefused as exc:
            raise ApiError(409, exc.code, str(exc), "tool_call_id") from exc
    record = await load_run(svc.backend, run_id, tenant)
    run = await run_object(svc.backend, record)
    run.stream_token = svc.auth.issue_token(run.id, tenant)
    return run


@router.post("/runs/{run_id}/approvals", operation_id="submitApproval",
             status_code=202, response_model=Run,
             responses=_ERRORS)
async def approve(run_id: str, body: ApprovalIn, svc: ServicesDep, who: PrincipalDep) -> Run:
    """Approve (optionally with edited arguments) or deny one pick the run waits for."""
    if body.decision == "deny" and body.arguments is not None:
        raise ApiError(422, "validation_error", "arguments: only with decision 'approve'",
                       "arguments")
    decision = Decision(kind=body.decision, reason=body.reason, arguments=body.arguments)
    return await decide_call(svc, who.tenant, run_id, body.tool_call_id, "approval", decision)


@router.post("/runs/{run_id}/tool_results", operation_id="submitToolResult",
             status_code=202, response_model=Run,
             responses=_ERRORS)
async def tool_result(run_id: str, body: ToolResultIn, svc: ServicesDep,
                      who: PrincipalDep) -> Run:
    """A client tool's result, fed back to the model as the pick's result."""
    content = _content(body.content)
    decision = Decision(kind="result", content=content, is_error=body.is_error)
    return await decide_call(svc, who.tenant, run_id, body.tool_call_id, "client_tool", decision)


def _content(value: str | list[dict[str, Any]]) -> list[TextContent | ImageContent]:
    if isinstance(value, str):
        return [TextContent(text=value)]
    try:
        return BLOCKS.validate_python(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        raise ApiError(422, "validation_error", f"content{where}: {err['msg']}",
                       f"content{where}") from exc
