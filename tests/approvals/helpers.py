"""Tools and helpers shared by the approval tests."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.api.conftest import Api
from tests.api.test_flows import Watch, types, user_texts
from tool_registry import function

__all__ = ["Watch", "decide", "hitl_delete", "hitl_echo", "parked", "results_sent", "types",
           "user_texts"]
RAN: list[tuple[str, dict[str, Any]]] = []
"""What the test tools really ran, in order (the worker runs in the test's process)."""


@function(toolsets=["hitl_testing"], approval=True)
def hitl_delete(path: str, recursive: bool = False) -> str:
    """Deletes a path (test tool that always needs approval)."""
    RAN.append(("hitl_delete", {"path": path, "recursive": recursive}))
    return f"deleted {path}"


@function(toolsets=["hitl_testing"])
def hitl_echo(text: str) -> str:
    """Echoes (test tool, no approval of its own)."""
    RAN.append(("hitl_echo", {"text": text}))
    return text


@function(toolsets=["hitl_testing"], approval=lambda args: args.get("amount", 0) > 100)
def hitl_pay(amount: int) -> str:
    """Pays (test tool: approval above 100)."""
    RAN.append(("hitl_pay", {"amount": amount}))
    return f"paid {amount}"


async def parked(api: Api, run_id: str, within: float = 20.0) -> dict[str, Any]:
    """The run once it is ``requires_action``."""
    return await api.wait_status(run_id, "requires_action", within=within)


async def decide(api: Api, run_id: str, call_id: str, decision: str = "approve",
                 **extra: Any) -> Any:
    """POST an approval decision; the response."""
    return await api.client.post(f"/runs/{run_id}/approvals",
                                 json={"tool_call_id": call_id, "decision": decision, **extra})


def results_sent(request: Any) -> list[tuple[str, bool, str]]:
    """``(tool_call_id, is_error, text)`` of every tool result in a model request."""
    return [(m.tool_call_id, m.is_error, "".join(c.text for c in m.content))
            for m in request.messages if m.role == "tool_result"]


async def until_count(watch: Watch, type_: str, count: int, within: float = 20.0) -> None:
    """Wait until ``watch`` saw ``count`` frames of ``type_``."""
    async with asyncio.timeout(within):
        while sum(f.event == type_ for f in watch.frames) < count:
            await asyncio.sleep(0.01)


@function(toolsets=["hitl_testing"])
async def hitl_delegate(task: str) -> str:
    """Runs a nested loop on the run's model (test tool)."""
    from app import runtime

    out = await runtime.exec(task)
    return f"inner said: {out.text}"


@function(toolsets=["hitl_testing"])
async def hitl_subagent(task: str) -> str:
    """Runs a nested loop on the run's model (test tool; records each run of its body)."""
    from app import runtime

    RAN.append(("hitl_subagent", {"task": task}))
    out = await runtime.exec(task)
    return f"inner said: {out.text} ({out.stop_reason})"
