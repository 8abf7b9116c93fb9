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

from app.api import control
from app.api.attachment_checks import check_result_images
from app.api.auth import Principal
from app.api.control import AnswerIn
from app.api.errors import ApiError, documented
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.routes.strict_json import StrictJsonRoute
from app.api.run_view import run_object
from app.api.schemas import ApprovalIn, Run, ToolResultIn
from app.api.services import Services
from app.engine.approvals import BLOCKS, Decision
from providers.messages import ImageContent, TextContent

router = APIRouter(tags=["approvals"], route_class=StrictJsonRoute)
_ERRORS = documented(400, 401, 404, 409, 413, 415, 422, 503)


async def answered(svc: Services, who: Principal, run_id: str, answer: AnswerIn) -> Run:
    """The Run after one answer (both endpoints)."""
    record = await control.answer(svc, who, run_id, [answer])
    run = await run_object(svc.backend, record)
    run.stream_token = svc.auth.issue_token(run.id, who.tenant, owner=record.owner)
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
    return await answered(svc, who, run_id, AnswerIn(body.tool_call_id, "approval", decision))


@router.post("/runs/{run_id}/tool_results", operation_id="submitToolResult",
             status_code=202, response_model=Run,
             responses=_ERRORS)
async def tool_result(run_id: str, body: ToolResultIn, svc: ServicesDep,
                      who: PrincipalDep) -> Run:
    """A client tool's result, fed back to the model as the pick's result."""
    content = _content(body.content)
    check_result_images(content, "content", svc)
    decision = Decision(kind="result", content=content, is_error=body.is_error)
    return await answered(svc, who, run_id,
                          AnswerIn(body.tool_call_id, "client_tool", decision))


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
