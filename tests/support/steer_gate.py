"""A run that is certainly live when a generated client steers it, without timing guesses.

The model (scripted) calls ``contract_gate``, which waits until ``open_gate_after_steer`` sees
a steering message queued on the client's run, then the model answers in text. So a client can
create the run, read it, steer it and read its events to the end at its own pace::

    api.fake.script = gated_script()
    async with open_gate_after_steer(api):
        ...run the generated client (tools=["contract_gate"])...
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from providers import fake
from tests.api.conftest import Api
from tool_registry import function

GATE = threading.Event()
GATE_RESULT = "the gate opened"
ANSWER = "steered and done"


@function(toolsets=["contract_testing"])
async def contract_gate() -> str:
    """Waits until the test opens the gate (test tool)."""
    await asyncio.to_thread(GATE.wait, 120)
    return GATE_RESULT


def gated_script() -> list[fake.Step]:
    return [fake.tool_calls(("contract_gate", {}), text_before="one moment"),
            fake.text(ANSWER, chunks=3)]


async def _steered_run(api: Api) -> None:
    while True:
        runs = (await api.client.get("/runs")).json()["runs"]
        if any(run["queue"]["steer"] for run in runs):
            return
        await asyncio.sleep(0.05)


@asynccontextmanager
async def open_gate_after_steer(api: Api, within: float = 120) -> AsyncIterator[None]:
    """Opens the gate once a run of ``api`` has a steering message queued (or on exit)."""
    GATE.clear()

    async def watch() -> None:
        try:
            async with asyncio.timeout(within):
                await _steered_run(api)
        except TimeoutError:
            pass  # the client never steered: let the run end, the test's own checks fail
        finally:
            GATE.set()

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()
        GATE.set()
