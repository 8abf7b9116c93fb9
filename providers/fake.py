"""A scripted provider for tests: each model call plays the next ``Step``.

Every request is recorded (``FakeProvider.requests``) so tests can assert exactly what the model
was sent. A step is a list of provider events, optionally paced (``delay`` between events) or
left hanging after its events (``hang``) to test aborts. Helpers build the common steps.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from providers.attachments import EVERYTHING, Accepts
from providers.base import ModelRequest
from providers.events import (
    DoneEvent,
    ErrorEvent,
    ProviderEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ThinkingDelta,
    ThinkingEnd,
    ThinkingStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from providers.messages import Usage


@dataclass(slots=True)
class Step:
    """One scripted model reply."""

    events: list[ProviderEvent]
    delay: float = 0.0
    hang: bool = False


def text(reply: str, *, chunks: int = 1, thinking: str | None = None,
         usage: Usage | None = None, delay: float = 0.0) -> Step:
    """A text reply streamed as ``chunks`` deltas (after optional thinking)."""
    events: list[ProviderEvent] = [StartEvent()]
    index = 0
    if thinking is not None:
        events += [ThinkingStart(0), ThinkingDelta(0, thinking), ThinkingEnd(0, "sig")]
        index = 1
    events.append(TextStart(index))
    events += [TextDelta(index, part) for part in _split(reply, chunks)]
    events += [TextEnd(index), DoneEvent("stop", usage or Usage(input_tokens=10,
                                                                output_tokens=5))]
    return Step(events, delay=delay)


def tool_calls(*calls: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str],
               text_before: str | None = None, stop_reason: str = "tool_use",
               arg_chunks: int = 2, delay: float = 0.0) -> Step:
    """A reply picking ``(name, args[, id])`` calls, arguments split into ``arg_chunks``."""
    events: list[ProviderEvent] = [StartEvent()]
    index = 0
    if text_before:
        events += [TextStart(0), TextDelta(0, text_before), TextEnd(0)]
        index = 1
    for n, call in enumerate(calls):
        name, args = call[0], call[1]
        call_id = call[2] if len(call) > 2 else f"call_{n + 1}"
        raw = json.dumps(args)
        events.append(ToolCallStart(index, call_id, name))
        events += [ToolCallDelta(index, part) for part in _split(raw, arg_chunks)]
        events.append(ToolCallEnd(index))
        index += 1
    events.append(DoneEvent(stop_reason, Usage(input_tokens=10, output_tokens=5)))  # type: ignore[arg-type]
    return Step(events, delay=delay)


def error(message: str, *, retryable: bool = False) -> Step:
    """A reply that fails after starting."""
    return Step([StartEvent(), ErrorEvent("error", message, retryable=retryable)])


def hanging(partial_text: str = "") -> Step:
    """A reply that streams ``partial_text`` and then never finishes (until cancelled)."""
    events: list[ProviderEvent] = [StartEvent()]
    if partial_text:
        events += [TextStart(0), TextDelta(0, partial_text)]
    return Step(events, hang=True)


def _split(s: str, parts: int) -> list[str]:
    if parts <= 1 or len(s) <= 1:
        return [s]
    size = max(1, -(-len(s) // parts))
    return [s[i:i + size] for i in range(0, len(s), size)]


ScriptItem = Step | Callable[[ModelRequest], Step]


@dataclass
class FakeProvider:
    """Plays ``script`` one step per call; ``repeat`` replays the last step forever."""

    script: list[ScriptItem] = field(default_factory=list)
    repeat: bool = False
    name: str = "fake"
    requests: list[ModelRequest] = field(default_factory=list)
    calls: int = 0
    closed: int = 0
    """How many streams were closed early (aborted) — asserts the stream really closes."""
    record: bool = True
    """Keep a deep copy of every request (off for benchmarks: copying is not the loop's cost)."""
    accepts: Accepts = EVERYTHING
    """What the run pipeline lets through to it (a test narrows it to see a refusal)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Record ``request`` and play the next step."""
        self.calls += 1
        if self.record:
            self.requests.append(copy.deepcopy(request))
        return self._play(request, self.calls - 1)

    async def _play(self, request: ModelRequest, n: int) -> AsyncIterator[ProviderEvent]:
        if n < len(self.script):
            item = self.script[n]
        elif self.repeat and self.script:
            item = self.script[-1]
        else:
            yield ErrorEvent("error", f"fake provider: no scripted step for call {n + 1}")
            return
        step = item(request) if callable(item) else item
        sent = 0
        try:
            for event in step.events:
                if step.delay:
                    await asyncio.sleep(step.delay)
                elif sent % 64 == 63:  # a real stream yields to the event loop between reads
                    await asyncio.sleep(0)
                yield event
                sent += 1
            if step.hang:
                await asyncio.Event().wait()
        finally:
            if step.hang or sent < len(step.events) - 1:
                self.closed += 1
