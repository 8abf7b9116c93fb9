"""The provider → loop vocabulary: what every adapter's stream yields.

A stream is ``start``, then any number of ``text_*``, ``thinking_*`` and ``toolcall_*`` events
(each block opened, extended and closed under one ``content_index``), then exactly one ``done``
or ``error`` and nothing after it. Adapters only translate the wire into these events; the one
place that merges them into an ``AssistantMessage`` is ``providers.accumulate``.

Once a stream has started a provider never raises: a failure is an ``error`` event whose
``stop_reason`` is ``error`` (or ``aborted``), with ``retryable`` set when the request may be sent
again (a broken stream, an overloaded server).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from providers.messages import Usage


@dataclass(slots=True)
class StartEvent:
    """The stream is open; ``model`` is the model that answers (may differ from the request)."""

    model: str = ""
    type: Literal["start"] = "start"


@dataclass(slots=True)
class TextStart:
    content_index: int
    type: Literal["text_start"] = "text_start"


@dataclass(slots=True)
class TextDelta:
    content_index: int
    delta: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(slots=True)
class TextEnd:
    content_index: int
    signature: str | None = None
    type: Literal["text_end"] = "text_end"


@dataclass(slots=True)
class ThinkingStart:
    content_index: int
    redacted: bool = False
    type: Literal["thinking_start"] = "thinking_start"


@dataclass(slots=True)
class ThinkingDelta:
    content_index: int
    delta: str
    type: Literal["thinking_delta"] = "thinking_delta"


@dataclass(slots=True)
class ThinkingEnd:
    """Closes a thinking block; ``signature`` is the provider's opaque replay token."""

    content_index: int
    signature: str | None = None
    type: Literal["thinking_end"] = "thinking_end"


@dataclass(slots=True)
class ToolCallStart:
    content_index: int
    id: str
    name: str
    type: Literal["toolcall_start"] = "toolcall_start"


@dataclass(slots=True)
class ToolCallDelta:
    """A fragment of the call's JSON arguments text, as the wire delivered it."""

    content_index: int
    delta: str
    type: Literal["toolcall_delta"] = "toolcall_delta"


@dataclass(slots=True)
class ToolCallEnd:
    """Closes a tool call. ``name`` fills in a name the wire only sent late; ``id`` is used only
    when no ``toolcall_start`` opened the call (a call keeps the id it opened with, the one its
    events already carry). A call the stream never closes is never run (``accumulate``)."""

    content_index: int
    id: str | None = None
    name: str | None = None
    signature: str | None = None
    type: Literal["toolcall_end"] = "toolcall_end"


@dataclass(slots=True)
class DoneEvent:
    """The reply is complete."""

    stop_reason: Literal["stop", "length", "tool_use"]
    usage: Usage = field(default_factory=Usage)
    type: Literal["done"] = "done"


@dataclass(slots=True)
class ErrorEvent:
    """The reply failed (``error``) or was cancelled (``aborted``); ``usage`` is what was billed."""

    stop_reason: Literal["error", "aborted"]
    error_message: str
    usage: Usage = field(default_factory=Usage)
    retryable: bool = False
    type: Literal["error"] = "error"


ProviderEvent: TypeAlias = (
    StartEvent | TextStart | TextDelta | TextEnd | ThinkingStart | ThinkingDelta | ThinkingEnd
    | ToolCallStart | ToolCallDelta | ToolCallEnd | DoneEvent | ErrorEvent
)
