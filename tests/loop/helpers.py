"""Running the loop with a scripted provider and a private registry, collecting events."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from app.engine import LoopConfig, LoopOutcome, run_loop
from app.engine.events import Event
from app.engine.queues import ListQueue
from providers.fake import FakeProvider, ScriptItem
from providers.messages import Message, UserMessage
from tool_registry import Registry, build_menu, function


@dataclass
class Run:
    provider: FakeProvider
    events: list[Event] = field(default_factory=list)
    outcome: LoopOutcome | None = None
    steering: ListQueue = field(default_factory=ListQueue)
    follow_up: ListQueue = field(default_factory=ListQueue)
    abort: asyncio.Event = field(default_factory=asyncio.Event)

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def sent(self, n: int) -> list[Message]:
        """The messages of the n-th provider call (0-based)."""
        return self.provider.requests[n].messages


def registry_with(*tools: Any) -> Registry:
    reg = Registry()
    for t in tools:
        reg.register(t)
    return reg


@function(register=False)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first
        b: the second
    """
    return a + b


@function(register=False)
def boom(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"boom: {reason}")


@function(register=False, timeout=0.05)
async def slow(seconds: float = 5.0) -> str:
    """Sleeps."""
    await asyncio.sleep(seconds)
    return "slept"


@function(register=False)
def maybe(n: int | None = None) -> str:
    """Optional int."""
    return f"n={n!r}"


def default_registry() -> Registry:
    return registry_with(add, boom, slow, maybe)


async def drive(script: list[ScriptItem], *, prompt: str | None = "hi",
                registry: Registry | None = None, config: LoopConfig | None = None,
                context: list[Message] | None = None, run: Run | None = None,
                **menu_args: Any) -> Run:
    run = run or Run(FakeProvider(script))
    if not run.provider.script:
        run.provider.script = script
    menu = build_menu(registry=registry or default_registry(), **menu_args)
    run.outcome = await run_loop(
        provider=run.provider, menu=menu, config=config or LoopConfig(model="m"),
        context=context if context is not None else [], emit=run.events.append,
        prompts=[UserMessage(content=prompt)] if prompt is not None else [],
        steering=run.steering, follow_up=run.follow_up, abort=run.abort)
    return run
