"""The neutral message model every provider adapter translates to and from.

Shapes follow API.md ("Messages"): snake_case fields, a literal ``type`` tag on every content
block and a literal ``role`` on every message, so one pydantic ``TypeAdapter`` parses and dumps
them for HTTP, storage and tests alike. Domain types are slotted dataclasses: the loop builds and
mutates them on every streamed delta, where a validating model would cost more than the loop.

``signature`` fields hold provider-specific opaque replay data (Anthropic thinking signatures,
Gemini ``thoughtSignature``, OpenAI Responses reasoning items). They are replayed only to the
provider that produced them (``AssistantMessage.provider``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import Field, TypeAdapter


@dataclass(slots=True, kw_only=True)
class TextContent:
    """A run of text, from the user, the model or a tool."""

    type: Literal["text"] = "text"
    text: str
    signature: str | None = None


@dataclass(slots=True, kw_only=True)
class ImageContent:
    """An image: base64 ``data`` with its ``mime_type``, or an ``https://`` ``url`` (its
    ``mime_type`` optional then). Exactly one of ``data`` and ``url`` is set (the run pipeline
    checks it); an adapter whose provider takes no URL fetches it (``providers.attachments``)."""

    type: Literal["image"] = "image"
    data: str | None = None
    url: str | None = None
    mime_type: str | None = None


@dataclass(slots=True, kw_only=True)
class DocumentContent:
    """A document for the model to read (a PDF, a text document, an office file): base64
    ``data`` or an ``https://`` ``url``, its ``mime_type`` and an optional file ``name``.
    ``providers.attachments`` lists the media types and how each provider is sent them."""

    type: Literal["document"] = "document"
    mime_type: str
    data: str | None = None
    url: str | None = None
    name: str | None = None


@dataclass(slots=True, kw_only=True)
class ThinkingContent:
    """Model reasoning. ``signature`` lets the same provider verify it when it is replayed."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    redacted: bool = False


@dataclass(slots=True, kw_only=True)
class ToolCall:
    """One function the model picked, with its parsed JSON ``arguments``."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    signature: str | None = None


@dataclass(slots=True, kw_only=True)
class Usage:
    """Token counts; ``total_tokens`` is whatever the provider reports or the sum of the rest."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    total_tokens: int = 0

    def add(self, other: Usage) -> None:
        """Add ``other`` into this one (run totals)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.total_tokens += other.total_tokens


StopReason: TypeAlias = Literal["stop", "length", "tool_use", "error", "aborted"]
UserContent: TypeAlias = Annotated[TextContent | ImageContent | DocumentContent,
                                   Field(discriminator="type")]
"""What a user message may hold: text, images and documents."""
ToolResultContent: TypeAlias = Annotated[TextContent | ImageContent, Field(discriminator="type")]
"""What a tool result may hold: text and images."""
Attachment: TypeAlias = ImageContent | DocumentContent
"""A content block whose bytes travel inline (``data``) or by reference (``url``)."""
AssistantContent: TypeAlias = Annotated[
    TextContent | ThinkingContent | ToolCall, Field(discriminator="type")
]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True, kw_only=True)
class UserMessage:
    """What a person (or a steering/follow-up queue) said."""

    role: Literal["user"] = "user"
    content: str | list[UserContent]
    timestamp: int = field(default_factory=_now_ms)
    id: str | None = None
    """The client's own id for the message (a toolkit's UI message id), kept with it so a
    read of the conversation returns it; providers never see it."""


@dataclass(slots=True, kw_only=True)
class AssistantMessage:
    """One model reply. ``stop_reason`` ``error``/``aborted`` carry ``error_message``."""

    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent] = field(default_factory=list)
    provider: str = ""
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    timestamp: int = field(default_factory=_now_ms)

    def tool_calls(self) -> list[ToolCall]:
        """The functions this reply picked, in the order the model gave them."""
        return [c for c in self.content if isinstance(c, ToolCall)]

    def text(self) -> str:
        """All text blocks joined: the run's result when this reply ends it."""
        return "".join(c.text for c in self.content if isinstance(c, TextContent))


@dataclass(slots=True, kw_only=True)
class ToolResultMessage:
    """A tool's answer to one ``ToolCall``; ``is_error`` results are fed back all the same."""

    role: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    content: list[ToolResultContent] = field(default_factory=list)
    details: Any = None
    is_error: bool = False
    timestamp: int = field(default_factory=_now_ms)


Message: TypeAlias = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")
]

message_adapter: TypeAdapter[Message] = TypeAdapter(Message)
messages_adapter: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def text_result(text: str, *, tool_call_id: str, tool_name: str, is_error: bool = False,
                details: Any = None) -> ToolResultMessage:
    """A tool result holding one text block."""
    return ToolResultMessage(tool_call_id=tool_call_id, tool_name=tool_name,
                             content=[TextContent(text=text)], details=details, is_error=is_error)


def dump_message(message: Message) -> dict[str, Any]:
    """The JSON-ready dict of a message (API.md shape; unset optional fields left out)."""
    return message_adapter.dump_python(message, mode="json",  # type: ignore[no-any-return]
                                       exclude_none=True)


def dump_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The JSON-ready list of messages."""
    return messages_adapter.dump_python(messages, mode="json",  # type: ignore[no-any-return]
                                        exclude_none=True)


def load_messages(data: object) -> list[Message]:
    """Parse a JSON-ready list of messages (raises ``pydantic.ValidationError``)."""
    return messages_adapter.validate_python(data)
