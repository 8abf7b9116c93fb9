"""The AI SDK's answers to a waiting run: tool approval responses and client-side tool outputs.

When a run parks, its UI message stream ends with the waiting calls as tool parts in state
``approval-requested`` (a ``tool-approval-request`` chunk) or ``input-available`` (a client
tool: a tool without ``execute`` in the page). The page answers with
``addToolApprovalResponse({id, approved, reason})`` (state ``approval-responded``) or
``addToolOutput({toolCallId, output | errorText})`` (``output-available`` /
``output-error``) and the transport sends the chat again, its last message the assistant's.
Each such part that answers a call the run waits for is applied as
``POST /runs/{id}/approvals`` or ``/tool_results`` would be (same checks, same 409s); parts
of calls the run does not wait for (server tools that already ran) are left alone.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from app.api.control import AnswerIn
from app.api.errors import ApiError
from app.engine.approvals import Decision
from providers.messages import TextContent


def answers(message: dict[str, Any], field: str) -> list[AnswerIn]:
    """The answers in the last (assistant) UI message, each naming the part it came from
    (``messages[3].parts[1]``); 422 naming ``field`` if it has none."""
    found = [a for j, part in enumerate(message.get("parts") or [])
             if (a := _answer(part, f"{field}.parts[{j}]")) is not None]
    if not found:
        raise ApiError(422, "validation_error", f"{field}.role: the last message must be the "
                       "user's, or the assistant's with tool approval responses or client "
                       "tool outputs", f"{field}.role")
    return found


def _answer(part: Any, field: str) -> AnswerIn | None:
    if not isinstance(part, dict) or not str(part.get("type", "")).startswith(
            ("tool-", "dynamic-tool")):
        return None
    call_id, state = str(part.get("toolCallId")), part.get("state")
    approval = part.get("approval")
    if state == "approval-responded" and isinstance(approval, dict):
        reason = approval.get("reason")
        kind: Literal["approve", "deny"] = "approve" if approval.get("approved") is True \
            else "deny"
        return AnswerIn(call_id, "approval", Decision(
            kind=kind, reason=str(reason) if reason is not None else None), field)
    if state in ("output-available", "output-error") and not isinstance(approval, dict):
        failed = state == "output-error"
        text = str(part.get("errorText")) if failed else _text(part.get("output"))
        return AnswerIn(call_id, "client_tool", Decision(
            kind="result", content=[TextContent(text=text)], is_error=failed), field)
    return None


def _text(output: Any) -> str:
    return output if isinstance(output, str) else orjson.dumps(output).decode()
