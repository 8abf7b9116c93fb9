"""A reply a crash test kills mid-text or mid-call, for worker processes
(``AGENTLOOP_PROVIDER_FACTORY=tests.engine.takeover_script:factory``).

Round 1 streams ``INTRO`` a word at a time, then ``takeover_weather({"city": "Oslo"})`` with
its arguments in ``ARG_CHUNKS`` deltas; round 2 streams ``ANSWER``. With
``AGENTLOOP_TEST_STALL`` set (``text`` or ``args``), round 1 stops after ``STALL_AFTER``
deltas of that kind and never goes on: the worker holds the run mid-reply until the test kills
it, with no guessed duration (``tool``: the tool never returns). The worker that resumes the
run has no stall and plays the same reply from its start (the script is stateless, as a model
asked the same question again).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable

from providers import fake
from providers.base import ModelRequest, Provider
from providers.events import (
    DoneEvent,
    ProviderEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from providers.fake import FakeProvider, Step
from providers.messages import Usage
from tests.engine.scripted import resolver, tool_results
from tool_registry import Registry, function

INTRO = "Let me look up the weather in Oslo for you. "
ANSWER = "It is snowing in Oslo, minus three degrees."
CALL_ID = "call_weather"
ARGS = {"city": "Oslo"}
ARG_CHUNKS = 4
STALL_AFTER = 3
"""Deltas of the stalled kind the killed worker streams (the text has 10 words)."""


@function(register=False)
async def takeover_weather(city: str) -> str:
    """The weather in a city (test tool); never answers under ``AGENTLOOP_TEST_STALL=tool``."""
    if os.environ.get("AGENTLOOP_TEST_STALL") == "tool":
        await asyncio.Event().wait()
    return f"snow in {city}"


def register(registry: Registry) -> None:
    if "takeover_weather" not in registry.tools:
        registry.register(takeover_weather)


def first_reply() -> list[ProviderEvent]:
    words = INTRO.split(" ")
    raw = json.dumps(ARGS)
    size = -(-len(raw) // ARG_CHUNKS)
    return [StartEvent(), TextStart(0),
            *(TextDelta(0, w + " ") for w in words[:-1]), TextEnd(0),
            ToolCallStart(1, CALL_ID, "takeover_weather"),
            *(ToolCallDelta(1, raw[i:i + size]) for i in range(0, len(raw), size)),
            ToolCallEnd(1), DoneEvent("tool_use", Usage(input_tokens=10, output_tokens=5))]


def stalled(events: list[ProviderEvent], kind: str) -> Step:
    """The events up to the ``STALL_AFTER``-th delta of ``kind``, then a hang."""
    wanted = TextDelta if kind == "text" else ToolCallDelta
    seen = 0
    for n, event in enumerate(events):
        seen += isinstance(event, wanted)
        if seen == STALL_AFTER:
            return Step(events[:n + 1], hang=True)
    raise AssertionError(f"no {STALL_AFTER} deltas of {kind} to stall after")


def script(stall: str | None) -> Callable[[ModelRequest], Step]:
    def step(request: ModelRequest) -> Step:
        if tool_results(request) == 0:
            events = first_reply()
            return stalled(events, stall) if stall in ("text", "args") else Step(events)
        return fake.text(ANSWER, chunks=6)

    return step


def factory() -> Callable[[str], tuple[Provider, str]]:
    """For worker processes: the script above, ``takeover_weather`` in the default registry."""
    from tool_registry import default_registry

    register(default_registry)
    stall = os.environ.get("AGENTLOOP_TEST_STALL") or None
    return resolver(lambda: FakeProvider(script=[script(stall)], repeat=True))
