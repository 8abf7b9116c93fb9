"""The loop's settings and its result: what a caller hands ``run_loop`` and gets back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.engine.approvals import ApprovalGate, WaitingCall
from app.engine.events import RunStopReason
from app.engine.queues import QueueMode
from app.engine.shared_state import SharedState
from app.engine.streaming import Deadline
from providers.base import Provider, ResponseFormat, ToolChoice
from providers.messages import AssistantMessage, Message, Usage

if TYPE_CHECKING:
    from app.engine.nested import Replay

ResolveProvider = Callable[[str], tuple[Provider, str]]
"""``"provider:model"`` → (the provider, the model id it is asked for); raises
``providers.catalog.ModelSpecError`` (or ``ValueError``) for a model it cannot serve."""


@dataclass(slots=True, kw_only=True)
class LoopConfig:
    """Per-run settings of the loop (API.md ``POST /runs`` fields)."""

    model: str
    """The model id the provider is asked for (no ``provider:`` prefix)."""
    model_label: str = ""
    """What ``agent_start`` reports (``provider:model``); defaults to ``model``."""
    system: str | None = None
    tool_choice: ToolChoice = "auto"
    reset_tool_choice: bool = True
    parallel_tool_calls: bool | None = None
    max_iterations: int | None = None
    max_total_tokens: int | None = None
    """The run's token budget (input + output of its own model calls, resumed attempts
    included): once spent, no further model call is made and the run ends ``budget``. Checked
    before each call, so a run overshoots by at most the one call that crossed it."""
    steering_mode: QueueMode = "one-at-a-time"
    follow_up_mode: QueueMode = "one-at-a-time"
    temperature: float | None = None
    max_tokens: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    response_format: ResponseFormat | None = None
    """What the final answer must be (``app.engine.output``); None: any text."""
    tool_timeout: float = 120.0
    max_result_chars: int = 32_000
    run_id: str = ""
    tenant: str | None = None
    workspace: Path | None = None
    depth: int = 0
    parent_tool_call_id: str | None = None
    deadline: Deadline | None = None
    """When the run must be over (``AGENTLOOP_RUN_TIMEOUT`` / ``timeout``); None: no deadline."""
    resolve: ResolveProvider | None = None
    """How a nested ``runtime.exec(model=...)`` in a tool body resolves its model."""
    call_ids: set[str] | None = None
    """Tool-call ids used so far in the run (shared with nested loops, so ids are run-unique)."""
    gate: ApprovalGate | None = None
    """Which picks wait for a person, and the answers so far (None: none ever waits)."""
    shared: SharedState | None = None
    """The run's shared state (``app.engine.shared_state``): the runner's, with where the run
    starts; the run's own loop makes an empty one otherwise; nested loops share it."""
    replay: Replay | None = None
    """A woken run's parked nested loops as its log holds them (``app.engine.nested``)."""


@dataclass(slots=True, kw_only=True)
class LoopOutcome:
    """How a loop ended: ``messages`` is everything it added (prompts included)."""

    stop_reason: RunStopReason
    error: str | None
    result: str | None
    messages: list[Message]
    usage: Usage
    output: dict[str, Any] | None = None
    """The final answer parsed (a run with a response format that ended ``stop``)."""
    parked: list[WaitingCall] = field(default_factory=list)
    """Non-empty: the loop stopped to wait for these answers (no ``agent_end`` was sent); the
    runner parks the run and continues it from the checkpoint once they arrive."""


def outcome_of(added: list[Message], reason: RunStopReason, error: str | None,
               output: dict[str, Any] | None) -> LoopOutcome:
    """The outcome of a loop that added ``added``: their usage summed; the result is the last
    text of a normal reply (``stop``), else the text of the very last reply, if any."""
    usage = Usage()
    result: str | None = None
    for msg in added:
        if isinstance(msg, AssistantMessage):
            usage.add(msg.usage)
            if msg.stop_reason in ("stop", "length", "tool_use"):
                result = msg.text() or result
    if reason != "stop":
        last = next((m for m in reversed(added) if isinstance(m, AssistantMessage)), None)
        result = last.text() if last is not None and last.text() else None
    return LoopOutcome(stop_reason=reason, error=error, result=result, messages=added,
                       usage=usage, output=output if reason == "stop" else None)
