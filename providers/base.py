"""The ``Provider`` seam: one method that streams provider events for one model request.

``ModelRequest`` is the neutral request every adapter maps to its wire format. Tools are plain
data (``ToolSpec``): providers know nothing of the registry, the loop or HTTP.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from providers.events import ProviderEvent
from providers.messages import Message


@dataclass(slots=True, frozen=True)
class ToolSpec:
    """What the model is told about one tool: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True, frozen=True)
class ForcedTool:
    """``tool_choice`` that forces the function ``name``."""

    name: str
    type: Literal["function"] = "function"


ToolChoice: TypeAlias = Literal["auto", "required", "none"] | ForcedTool


@dataclass(slots=True, frozen=True)
class ResponseFormat:
    """What a run's final answer must be: one JSON value matching ``schema`` (an object JSON
    Schema). ``strict``: the schema is strict-compatible and providers that constrain their
    decoding to a schema are asked to (see ``providers/_output_format.py``)."""

    name: str
    schema: dict[str, Any]
    strict: bool = False
    description: str | None = None


@dataclass(slots=True, kw_only=True)
class ModelRequest:
    """One call to a model: everything an adapter needs to build its wire request."""

    model: str
    system: str | None = None
    messages: list[Message] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    response_format: ResponseFormat | None = None
    """The final answer's format, mapped to the provider's own where it has one (each
    adapter's docstring says how), else stated in the system prompt."""
    options: dict[str, Any] = field(default_factory=dict)
    """Provider-specific extras (e.g. ``reasoning_effort``), passed through where understood."""


class Provider(Protocol):
    """A model backend. ``stream`` yields ``start`` … then exactly one ``done`` or ``error``.

    It never raises after the first event; cancelling the consumer (``aclose`` on the iterator,
    or task cancellation) must close the underlying connection.
    """

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the reply to ``request`` as provider events."""
        ...
