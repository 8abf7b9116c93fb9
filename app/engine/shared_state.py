"""A run's shared state: one JSON object the client and the run's tools both see (AG-UI's
agent state). Its history is in the run's log, so a replay or a resumed worker rebuilds it::

    the run starts with a state (its request's, else its thread's last) ─▶ state_snapshot
    a tool's ctx.update_state(ops) ─▶ applied all or nothing ─▶ state_delta (the ops)
    a tool's ctx.set_state(value) ─▶ state_snapshot
    the run ends ─▶ its final state is stored on the run (the thread's next run starts there)

One holder per run, shared by the loops nested in its tools (their tools change the same
state); its events are the run's (depth 0).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from app.engine.events import Event, StateDelta, StateSnapshot
from app.engine.json_patch import PatchError, apply_patch

MAX_STATE_BYTES = 256 * 1024
"""The largest a state may grow (as JSON): an update past it is refused."""


class SharedState:
    """The state of one run (``None`` until something sets it)."""

    def __init__(self, value: dict[str, Any] | None) -> None:
        self._value = value
        self._emit: Callable[[Event], None] = _nowhere

    def bind(self, emit: Callable[[Event], None]) -> None:
        """Where its events go: the run's own loop (depth 0) binds it as it starts."""
        self._emit = emit

    @property
    def value(self) -> dict[str, Any] | None:
        """The current state (a copy: change it through ``set`` or ``patch``)."""
        return copy.deepcopy(self._value)

    def announce(self) -> None:
        """``state_snapshot`` of the state the run starts with (nothing when it has none)."""
        if self._value is not None:
            self._emit(StateSnapshot(state=copy.deepcopy(self._value)))

    def set(self, value: dict[str, Any]) -> None:
        """Replace the state (``state_snapshot``); ``ValueError`` for a non-object or too big."""
        if not isinstance(value, dict):
            raise ValueError("the shared state is a JSON object")
        _check_size(value)
        self._value = copy.deepcopy(value)
        self._emit(StateSnapshot(state=copy.deepcopy(value)))

    def patch(self, ops: list[dict[str, Any]]) -> None:
        """Apply RFC 6902 operations, all or none (``state_delta``); ``ValueError``
        (``PatchError``) when they do not apply or leave no object."""
        after = apply_patch(self._value if self._value is not None else {}, ops)
        if not isinstance(after, dict):
            raise PatchError("the shared state must stay a JSON object")
        _check_size(after)
        self._value = after
        self._emit(StateDelta(delta=copy.deepcopy(ops)))


def _nowhere(event: Event) -> None:
    return None


def _check_size(value: dict[str, Any]) -> None:
    try:
        size = len(orjson.dumps(value))
    except TypeError as exc:
        raise ValueError(f"the shared state must be JSON: {exc}") from None
    if size > MAX_STATE_BYTES:
        raise ValueError(f"the shared state would be {size} bytes (at most {MAX_STATE_BYTES})")


def fold(events: Iterable[dict[str, Any]], start: dict[str, Any] | None
         ) -> dict[str, Any] | None:
    """The state after a run's logged state events (decoded), from ``start``: what a resumed
    worker goes on from."""
    value = start
    for event in events:
        if event.get("type") == "state_snapshot":
            value = event["state"]
        elif event.get("type") == "state_delta":
            try:
                after = apply_patch(value if value is not None else {}, event["delta"])
            except PatchError:
                continue  # (it applied when it was written)
            value = after if isinstance(after, dict) else value
    return value
