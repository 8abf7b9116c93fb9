"""What ``/mcp`` offers and what a call of it does.

The tools are the caller's agents (an end user's: those its token grants), each taking
``{"input": "..."}``; without agents, a tenant's key gets one ``run`` tool taking the input
and a few run options (``model``, ``system``, ``toolset``, ``tools``). A call is a run made
through the one pipeline (``app.api.pipeline.submit``: the same checks as every door), then
followed through its log: a progress notification names the run as it starts, then each tool
the run calls is one, and the
result holds the final answer and the run's id (``structuredContent``: ``run_id``,
``status``, ``stop_reason``, ``result``). A refused request is an ``isError`` result naming
the field; a client that hangs up mid-call cancels the run (the SDK cancels the handler when
the response stream closes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from mcp import types
from pydantic import ValidationError

from app.api import control
from app.api.auth import Principal
from app.api.errors import ApiError
from app.api.options import RunOptions
from app.api.pipeline import RunRequest, submit
from app.api.services import Services
from app.delivery.log_pages import log_pages

log = logging.getLogger(__name__)

RUN_TOOL = "run"
INPUT = {"input": {"type": "string", "minLength": 1, "description": "the user's message"}}
RUN_SCHEMA: dict[str, Any] = {"type": "object", "required": ["input"], "properties": {
    **INPUT,
    "model": {"type": "string", "description": "provider:model (the server's default if unset)"},
    "system": {"type": "string", "description": "the system prompt"},
    "toolset": {"type": "string", "description": "the toolset the run may use"},
    "tools": {"type": "array", "items": {"type": "string"}, "description": "tools it may use"},
}}
AGENT_SCHEMA: dict[str, Any] = {"type": "object", "required": ["input"], "properties": INPUT}
Notify = Callable[[str], Awaitable[None]]


async def offered(svc: Services, who: Principal) -> list[types.Tool]:
    """The tools ``who`` may call."""
    agents = [a for a in await svc.agents.all(who.tenant)
              if who.agents is None or a.spec.name in who.agents]
    if agents:
        return [types.Tool(name=a.spec.name, inputSchema=AGENT_SCHEMA,
                           description=a.spec.description or f"the agent {a.spec.name}")
                for a in agents]
    if who.end_user:
        return []
    return [types.Tool(name=RUN_TOOL, inputSchema=RUN_SCHEMA, description=(
        "Run an agentloop tool-calling loop on a message; returns its final answer and run id"))]


async def call(svc: Services, who: Principal, name: str, args: dict[str, Any],
               notify: Notify) -> types.CallToolResult:
    """Run ``name`` on ``args`` to its end (see the module docstring)."""
    try:
        request = await _request(svc, who, name, args)
        submitted = await submit(svc, request)
    except ApiError as exc:
        return _error(exc.message)
    run_id = submitted.run_id
    try:
        # the run's id first: a client can steer, follow up or cancel it over the REST API
        # while the call goes on
        await notify(f"run {run_id} started")
        await _follow(svc, run_id, notify)
    except asyncio.CancelledError:  # the client cancelled its call: so is the run
        await asyncio.shield(_cancel(svc, who, run_id))
        raise
    return await _outcome(svc, run_id)


async def _request(svc: Services, who: Principal, name: str,
                   args: dict[str, Any]) -> RunRequest:
    options = {k: v for k, v in args.items() if k != "input"}
    agent = any(t.name == name and t.name != RUN_TOOL for t in await offered(svc, who))
    if not agent and (name != RUN_TOOL or who.end_user):
        raise ApiError(404, "tool_not_found", f"no tool {name!r}")
    try:
        parsed = RunOptions.model_validate(options)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ApiError(422, "validation_error", f"{field}: {err['msg']}", field) from exc
    # an agent's tool advertises only ``input``: any option it is given goes through the
    # agent's field locks in the pipeline, as at every door (403 naming a locked one)
    return RunRequest(principal=who, options=parsed, input=args["input"],
                      agent=name if agent else None, set_fields=parsed.options_set())


async def _follow(svc: Services, run_id: str, notify: Notify) -> None:
    """Until the run ends (or parks): its tool calls as progress."""
    poll = svc.settings.sse_ping_seconds
    async for page in log_pages(svc.backend, run_id, 0, poll=poll, parked=lambda: True):
        for stored in page:
            event = orjson.loads(stored.data)
            if event.get("depth"):
                continue
            if event["type"] == "tool_execution_start":
                await notify(f"calling {event['tool_name']}")
            elif event["type"] == "agent_end":
                return
        if not page:
            record = await svc.backend.get_run(run_id)
            if record is not None and record.status == "requires_action":
                return


async def _outcome(svc: Services, run_id: str) -> types.CallToolResult:
    record = await svc.backend.get_run(run_id)
    if record is None:
        return _error(f"run {run_id} is gone")
    summary = {"run_id": run_id, "status": record.status, "stop_reason": record.stop_reason,
               "result": record.result}
    if record.status == "requires_action":
        text = (f"run {run_id} waits for a person's approval: answer it with POST "
                f"/runs/{run_id}/approvals")
    else:
        text = record.result or record.error or "(no answer)"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text),
                 types.TextContent(type="text", text=f"run_id: {run_id} ({record.status})")],
        structuredContent=summary, isError=record.status == "failed")


async def _cancel(svc: Services, who: Principal, run_id: str) -> None:
    try:
        await control.cancel(svc, who, run_id)
    except ApiError:
        pass  # it ended meanwhile
    except Exception:
        log.exception("run %s: could not cancel it for its MCP client", run_id)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                isError=True)
