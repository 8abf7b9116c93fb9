"""Issue 9 item 2, sibling: a task that a tool starts and that raises ``SystemExit`` or
``KeyboardInterrupt`` cannot stop the service. asyncio re-raises those two from any task out of
the event loop; the service runs on uvloop (``LiveServer`` serves the app as ``agentloop
serve`` does), where the loop, the worker and every run on it would go down."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from providers import fake
from tests.api.conftest import Api
from tool_registry import default_registry, function


async def _exits(kind: str) -> None:
    raise {"exit": SystemExit(3), "keyboard": KeyboardInterrupt()}[kind]


@pytest.fixture
def spawning_tools() -> Iterator[tuple[str, str]]:
    """Two tools in the service's registry for one test: one awaits the task it starts, one
    leaves it running (fire and forget)."""
    @function
    async def awaits_a_dying_task(kind: str) -> str:
        """Starts a task that raises SystemExit or KeyboardInterrupt, and awaits it."""
        await asyncio.create_task(_exits(kind))
        return "unreachable"

    @function
    async def forgets_a_dying_task(kind: str) -> str:
        """Starts a task that raises SystemExit or KeyboardInterrupt, and returns at once."""
        task = asyncio.get_running_loop().create_task(_exits(kind))
        await asyncio.sleep(0)  # the task runs (and raises) before the call ends
        await asyncio.wait({task})
        return f"left it: {task.done()}"

    try:
        yield awaits_a_dying_task.name, forgets_a_dying_task.name
    finally:
        default_registry.tools.pop(awaits_a_dying_task.name, None)
        default_registry.tools.pop(forgets_a_dying_task.name, None)


@pytest.mark.parametrize("kind", ["exit", "keyboard"])
async def test_a_tool_task_raising_systemexit_does_not_stop_the_service(
        api: Api, spawning_tools: tuple[str, str], kind: str) -> None:
    awaits, forgets = spawning_tools
    api.fake.script = [fake.tool_calls((awaits, {"kind": kind}), (forgets, {"kind": kind})),
                       fake.text("still here"), fake.text("again")]
    run = await api.create(input="go", tools=[awaits, forgets])
    done = await api.wait_status(run["id"], "completed", "failed", within=30)
    assert (done["status"], done["result"]) == ("completed", "still here")
    results = [m for m in done["messages"] if m["role"] == "tool_result"]
    assert [r["is_error"] for r in results] == [True, False]
    named = {"exit": "SystemExit (3)", "keyboard": "KeyboardInterrupt"}[kind]
    assert f"a task started by a tool raised {named}" in results[0]["content"][0]["text"]
    assert results[1]["content"][0]["text"] == "left it: True"
    # the loop is alive: the API answers and the next run completes
    assert (await api.client.get("/healthz")).status_code == 200
    again = await api.create(input="again", tools=[])
    final = await api.wait_status(again["id"], "completed", "failed", within=30)
    assert (final["status"], final["result"]) == ("completed", "again"), final.get("error")
