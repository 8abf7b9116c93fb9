"""Hand a run from one in-process worker to another at a chosen point (both backends): a tool
that holds until released, a backend whose follow-up ``take`` never returns, span checks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from app.store import Backend
from providers.base import ModelRequest, Provider
from providers.fake import FakeProvider, ScriptItem, Step
from providers.messages import AssistantMessage
from tests.engine import scripted
from tool_registry import Registry, function


class Gate:
    """``reached`` is set when something waits at the gate; it passes once ``opened``."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.opened = asyncio.Event()

    async def wait(self) -> None:
        self.reached.set()
        await self.opened.wait()


HOLD = Gate()


@function(register=False)
async def hold() -> str:
    """Waits at the test's gate."""
    await HOLD.wait()
    return "held"


def registry(*extra: Any) -> Registry:
    reg = scripted.registry()
    for tool in (hold, *extra):
        reg.register(tool)
    return reg


def reset() -> None:
    global HOLD
    HOLD = Gate()
    scripted.CALLS.clear()


def rounds(request: ModelRequest) -> int:
    """Which round this request is (1-based): one more than the replies in its history."""
    return 1 + sum(isinstance(m, AssistantMessage) for m in request.messages)


def by_round(*steps: Step) -> Callable[[ModelRequest], Step]:
    """A stateless script: round n plays ``steps[n-1]`` (the last one repeats)."""
    return lambda request: steps[min(rounds(request), len(steps)) - 1]


def shared(*script: ScriptItem) -> tuple[FakeProvider, Callable[[str], tuple[Provider, str]]]:
    """One provider for every worker, so its ``requests`` count the model calls of the run."""
    provider = FakeProvider(script=list(script), repeat=True)
    return provider, scripted.resolver(lambda: provider)


class StuckAt:
    """A backend whose ``method`` never returns: its caller sits there (``reached`` set), so
    stopping the worker hands the run back, or loses it, at that point. ``close_queues``:
    where a run with a final answer looks for queued messages before it ends."""

    def __init__(self, backend: Backend, method: str) -> None:
        self._backend = backend
        self._method = method
        self.reached = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        if name != self._method:
            return getattr(self._backend, name)

        async def stuck(*args: Any, **kwargs: Any) -> Any:
            self.reached.set()
            await asyncio.Event().wait()

        return stuck


def one_result_per_call(history: list[dict[str, Any]]) -> bool:
    """Every tool call of a usable reply has exactly one result in the history."""
    calls = [c["id"] for m in history if m["role"] == "assistant"
             and m["stop_reason"] not in ("error", "aborted")
             for c in m["content"] if c["type"] == "tool_call"]
    results = [m["tool_call_id"] for m in history if m["role"] == "tool_result"]
    return sorted(calls) == sorted(results)


PAIRS = {"agent_end": "agent_start", "turn_end": "turn_start", "message_end": "message_start",
         "tool_execution_end": "tool_execution_start"}


def closed_spans(log: list[dict[str, Any]]) -> bool:
    """Each start is followed by one matching end (same depth and call) before another start of
    its kind opens at that depth; nothing is left open."""
    open_: list[tuple[Any, Any, Any]] = []
    for e in log:
        key = (e["type"], e.get("depth", 0), e.get("tool_call_id"))
        if e["type"] in PAIRS.values():
            assert key not in open_, f"second {key} before its end (seq {e['seq']})"
            open_.append(key)
        elif e["type"] in PAIRS:
            start = (PAIRS[e["type"]], key[1], key[2])
            assert start in open_, f"{key} without a start (seq {e['seq']})"
            open_.remove(start)
    assert open_ == [], f"never ended: {open_}"
    return True


def assert_clean_log(log: list[dict[str, Any]]) -> None:
    """Seqs in order, one depth-0 agent_start and agent_end (last), every start ended."""
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    top = [e["type"] for e in log if e.get("depth", 0) == 0]
    assert top.count("agent_start") == 1 and top.count("agent_end") == 1
    assert log[-1]["type"] == "agent_end" and log[-1]["depth"] == 0
    assert closed_spans(log)
