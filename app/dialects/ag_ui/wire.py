"""AG-UI's wire form: the official encoder, a fast path for the token events, and what the
projector reads off native events (which loop, final text, timestamps)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, TypeAlias

import orjson
from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder

from app.dialects.nested import result_text

ENCODER = EventEncoder()


@dataclass(slots=True, frozen=True)
class Delta:
    """A ``TEXT_MESSAGE_CONTENT``, ``REASONING_MESSAGE_CONTENT`` or ``TOOL_CALL_ARGS`` event,
    the events of every streamed token, encoded straight to the bytes ``EventEncoder`` writes
    for them (pydantic's model and serializer cost ~5x the rest of a frame; tests/js
    test_dialect_logs.py checks the two encodings agree)."""

    type: str
    key: str
    """``messageId`` or ``toolCallId``."""
    id: str
    delta: str
    sub: str | None = None

    def json(self, timestamp: int | None) -> bytes:
        """The event's JSON, as the encoder writes it (unset fields left out)."""
        out: dict[str, object] = {"type": self.type}
        if timestamp is not None:
            out["timestamp"] = timestamp
        if self.sub is not None:
            out["subagentRunId"] = self.sub
        out[self.key] = self.id
        out["delta"] = self.delta
        return orjson.dumps(out)


AgUiEvent: TypeAlias = BaseEvent | Delta


def loop_of(event: dict[str, Any]) -> tuple[int, str]:
    """Which loop an event is from: its depth and the tool call running it."""
    return int(event.get("depth") or 0), str(event.get("parent_tool_call_id") or "")


def final_text(event: dict[str, Any]) -> str:
    """The text of the last assistant message a loop added."""
    for message in reversed(event.get("messages") or []):
        if message.get("role") == "assistant":
            return result_text(message.get("content") or [])
    return ""


def millis(ts: object) -> int | None:
    return _parse_ts(ts) if isinstance(ts, str) else None


@lru_cache(maxsize=64)
def _parse_ts(ts: str) -> int:
    """Epoch milliseconds of a stored ``ts`` (many events share one: cached)."""
    return int(datetime.fromisoformat(ts).timestamp() * 1000)
