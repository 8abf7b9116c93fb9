"""The scripted model and tools of the trace crash test, loaded by its worker processes
(``AGENTLOOP_PROVIDER_FACTORY=tests.ops.trace_scripted:factory``) and imported by the test
(its API checks the tool names against the default registry)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from providers import fake
from providers.base import ModelRequest, Provider
from providers.fake import FakeProvider, Step
from providers.messages import ToolResultMessage
from tool_registry import function

LOCATION = {"name": "get_location", "parameters": {"type": "object", "properties": {}}}
"""The client tool whose answer the run waits for (parked, then woken: a new attempt)."""


@function(toolsets=["ops_trace_testing"])
def trace_lookup() -> str:
    """Answers at once (test tool)."""
    return "found"


@function(toolsets=["ops_trace_testing"])
async def trace_wait() -> str:
    """Waits until the file AGENTLOOP_TEST_GATE names exists (test tool): the test kills the
    worker while it waits, and opens the next worker's gate when it chooses."""
    gate = os.environ.get("AGENTLOOP_TEST_GATE")
    while gate and not await asyncio.to_thread(os.path.exists, gate):
        await asyncio.sleep(0.02)
    return "waited"


def step(request: ModelRequest) -> Step:
    """By the tool results so far (stateless: a resumed run on another worker goes on with
    the same script): trace_lookup, trace_wait, the client's get_location, then "done"."""
    n = sum(isinstance(m, ToolResultMessage) for m in request.messages)
    picks = [("trace_lookup", "call_lookup"), ("trace_wait", "call_wait"),
             ("get_location", "call_loc")]
    if n < len(picks):
        name, call_id = picks[n]
        return fake.tool_calls((name, {}, call_id))
    return fake.text("done")


def factory() -> Callable[[str], tuple[Provider, str]]:
    """Every ``fake:{model}`` is the script above."""

    def resolve(model: str) -> tuple[Provider, str]:
        return FakeProvider(script=[step], repeat=True), model.partition(":")[2]

    return resolve
