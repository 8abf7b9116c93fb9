"""Tools and scripted providers for engine tests, also loaded by subprocess workers
(``AGENTLOOP_PROVIDER_FACTORY=tests.engine.scripted:crash_factory``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from providers import fake
from providers.base import ModelRequest, Provider
from providers.fake import FakeProvider, Step
from providers.messages import ToolResultMessage
from tool_registry import Registry, function

CALLS: list[str] = []


@function(register=False)
def mark(n: int) -> str:
    """Record that it ran (in-process list, and the AGENTLOOP_TEST_MARKS file if set)."""
    CALLS.append(f"mark:{n}")
    path = os.environ.get("AGENTLOOP_TEST_MARKS")
    if path:
        with open(path, "a") as f:
            f.write(f"mark:{n}\n")
    return f"marked {n}"


@function(register=False)
async def nap(seconds: float) -> str:
    """Sleep, then answer; with AGENTLOOP_TEST_GATE set, wait until that file exists instead
    (a crash test opens the gate when it is ready, rather than guessing a duration)."""
    gate = os.environ.get("AGENTLOOP_TEST_GATE")
    if gate:
        while not await asyncio.to_thread(os.path.exists, gate):
            await asyncio.sleep(0.02)
    else:
        await asyncio.sleep(seconds)
    CALLS.append("nap")
    return "rested"


def registry() -> Registry:
    reg = Registry()
    reg.register(mark)
    reg.register(nap)
    return reg


def tool_results(request: ModelRequest) -> int:
    return sum(isinstance(m, ToolResultMessage) for m in request.messages)


def mark_nap_done(nap_seconds: float) -> Callable[[ModelRequest], Step]:
    """Round 1 picks mark, round 2 picks nap, round 3 answers "done" (stateless: a resumed
    run on another worker continues the same script)."""

    def step(request: ModelRequest) -> Step:
        n = tool_results(request)
        if n == 0:
            return fake.tool_calls(("mark", {"n": 1}, "call_mark"))
        if n == 1:
            return fake.tool_calls(("nap", {"seconds": nap_seconds}, "call_nap"))
        return fake.text("done", chunks=3)

    return step


def resolver(script: list[fake.ScriptItem] | Callable[[], FakeProvider]
             ) -> Callable[[str], tuple[Provider, str]]:
    def resolve(model: str) -> tuple[Provider, str]:
        provider = script() if callable(script) else FakeProvider(script=list(script))
        return provider, model.partition(":")[2]

    return resolve


def crash_factory() -> Callable[[str], tuple[Provider, str]]:
    """For subprocess workers: mark, nap(AGENTLOOP_TEST_NAP s), done; tools registered in the
    default registry."""
    from tool_registry import default_registry

    default_registry.register(mark)
    default_registry.register(nap)
    seconds = float(os.environ.get("AGENTLOOP_TEST_NAP", "2"))
    return resolver(lambda: FakeProvider(script=[mark_nap_done(seconds)], repeat=True))
