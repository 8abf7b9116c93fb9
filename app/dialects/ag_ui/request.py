"""AG-UI's ``RunAgentInput`` (``ag-ui-protocol`` 1.0) as a run request.

The thread id names the conversation (``app/dialects/conversation.py``), whose history the
server keeps: the last message, the user's, is read, checked and posted to it (its ``id``
kept: snapshots show it); the earlier ones are the client's copy and are not read again
(a message refused once does not fail the next input). The user message takes text,
``image`` and ``document`` parts (``data`` or ``url`` sources, ``app.dialects.attachments``);
``system`` and ``developer`` text (wherever it is) joins the run's ``system``, and so does
``context`` (one line per item). A non-empty ``state`` is the run's shared state to start
from (``app.engine.shared_state``; an empty one: the thread's, as its last run left it).
``forwardedProps.agentloop`` takes the run options (``app.api.options``: model, server tools,
approval, ...) and ``cancel_on_disconnect``; other forwarded props are left alone. Errors name
the input's fields (``tools[0].name``, ``forwardedProps.agentloop.approval[0]``).

Frontend-defined ``tools`` are the run's ``client_tools``: a pick of one ends the AG-UI run
with the pending tool call (the client runs it), and the next input, whose last messages are
the ``tool`` messages with its results, answers the waiting run (``tool_answers``, as
``POST /runs/{id}/tool_results``) instead of posting a new user message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import ConfigDict, StrictBool, ValidationError

from app.api.checks import MESSAGE_ID, validation_to_api
from app.api.errors import ApiError
from app.api.options import AGENT_NAME, RunOptions
from app.dialects.attachments import ag_ui_names, from_ag_ui_part


class AgentloopProps(RunOptions):
    """``forwardedProps.agentloop``: the run options (``app.api.options``, as on ``POST /runs``;
    frontend tools come in the input's ``tools``) and ``cancel_on_disconnect``."""

    model_config = ConfigDict(extra="forbid")
    cancel_on_disconnect: StrictBool = False


def _invalid(field: str, problem: str, status: int = 422,
             code: str = "validation_error") -> ApiError:
    return ApiError(status, code, f"{field}: {problem}", field)


def agentloop_props(body: RunAgentInput) -> AgentloopProps:
    """The run options in ``forwardedProps.agentloop`` (422 naming the field if malformed)."""
    props = body.forwarded_props
    raw = props.get("agentloop") if isinstance(props, dict) else None
    try:
        props_in = AgentloopProps.model_validate(raw or {})
    except ValidationError as exc:
        raise validation_to_api(exc, "forwardedProps.agentloop") from exc
    if props_in.client_tools is not None:
        raise _invalid("forwardedProps.agentloop.client_tools", "an AG-UI client declares "
                       "its frontend tools in the input's tools")
    return props_in


def agent_name(body: RunAgentInput) -> str | None:
    """``forwardedProps.agent``: the agent to run (422 naming it if it is no agent name)."""
    props = body.forwarded_props
    name = props.get("agent") if isinstance(props, dict) else None
    if name is not None and not (isinstance(name, str) and re.fullmatch(AGENT_NAME, name)):
        raise _invalid("forwardedProps.agent", "an agent's name (1 to 64 letters, digits, "
                       "'_' or '-')")
    return name


def wire_name(body: RunAgentInput) -> Callable[[str], str]:
    """The input's name of a pipeline field: frontend tools are ``tools``, the new message is
    the last of ``messages``, every other option is under ``forwardedProps.agentloop``."""
    last = max(len(body.messages) - 1, 0)

    def rename(name: str) -> str:
        if name.startswith("client_tools"):
            return "tools" + name.removeprefix("client_tools")
        if name.startswith("input"):
            return ag_ui_names(name, last) or f"messages[{last}].content"
        if name == "agent":
            return "forwardedProps.agent"
        return f"forwardedProps.agentloop.{name}"

    return rename


def client_tools(body: RunAgentInput) -> list[dict[str, Any]] | None:
    """The input's frontend tools as ``client_tools`` (None: it has none)."""
    return [{"name": t.name, "description": t.description or "",
             "parameters": t.parameters or {"type": "object", "properties": {}}}
            for t in body.tools or []] or None


def tool_answers(body: RunAgentInput) -> list[tuple[str, str, bool, str]]:
    """``(tool call id, content, is_error, field)`` of the ``tool`` messages that end the input
    (the results of frontend tools the last run ended with)."""
    out: list[tuple[str, str, bool, str]] = []
    raw = [m.model_dump(by_alias=True) for m in body.messages]
    for i in range(len(raw) - 1, -1, -1):
        if raw[i]["role"] != "tool":
            break
        result = _tool_result(raw[i], {})
        out.append((result["tool_call_id"], result["content"][0]["text"], result["is_error"],
                    f"messages[{i}]"))
    return out[::-1]


def to_messages(body: RunAgentInput) -> tuple[dict[str, Any], str | None]:
    """(the new user message, the system text) of the input; the last message must be the
    user's."""
    raw = [m.model_dump(by_alias=True) for m in body.messages]
    if not raw or raw[-1]["role"] != "user":
        raise _invalid(f"messages[{max(len(raw) - 1, 0)}].role",
                       "the last message must be the user's")
    last = raw[-1]
    prompt: dict[str, Any] = {"role": "user",
                              "content": _user_content(last, f"messages[{len(raw) - 1}]")}
    if isinstance(last.get("id"), str) and MESSAGE_ID.fullmatch(last["id"]):
        prompt["id"] = last["id"]
    system = [str(m.get("content") or "") for m in raw if m["role"] in ("system", "developer")]
    system += [f"{c.description}: {c.value}" for c in body.context or []]
    return prompt, "\n\n".join(s for s in system if s) or None


def start_state(body: RunAgentInput) -> dict[str, Any] | None:
    """The input's ``state`` as the run's shared state to start from (None: empty or not an
    object, so the thread's goes on)."""
    state = body.state
    return state if isinstance(state, dict) and state else None


def _user_content(message: dict[str, Any], field: str) -> str | list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return content
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content or []):
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        else:
            blocks.append(from_ag_ui_part(part, f"{field}.content[{j}]"))
    return blocks


def _tool_result(message: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    content = message.get("content")
    text = content if isinstance(content, str) else "".join(
        str(p.get("text", "")) for p in content or [] if p.get("type") == "text")
    call_id = str(message.get("toolCallId"))
    return {"role": "tool_result", "tool_call_id": call_id,
            "tool_name": names.get(call_id, "unknown"),
            "content": [{"type": "text", "text": text}], "is_error": bool(message.get("error"))}
