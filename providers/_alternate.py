"""Neutral history → a provider's alternating-role list, same-role neighbours merged.

Anthropic, Gemini and Bedrock all want user/assistant turns that alternate, with tool results
riding in a user turn; they differ only in how each message becomes blocks (parts), the name
of the model's role and of the block list. The mapping functions are the adapter's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, assert_never

from providers.messages import (
    AssistantMessage,
    Message,
    TextContent,
    ToolResultMessage,
    UserMessage,
)

_Json = dict[str, Any]
C = TypeVar("C")


def alternate(messages: list[Message], *, user: Callable[[UserMessage], list[_Json]],
              assistant: Callable[[AssistantMessage], list[_Json]],
              tool_result: Callable[[ToolResultMessage], list[_Json]],
              model_role: str = "assistant", key: str = "content") -> list[_Json]:
    """``[{"role", key: blocks}]`` for ``messages``; messages with no blocks are left out."""
    out: list[_Json] = []
    for message in messages:
        if isinstance(message, UserMessage):
            role, blocks = "user", user(message)
        elif isinstance(message, AssistantMessage):
            role, blocks = model_role, assistant(message)
        elif isinstance(message, ToolResultMessage):
            role, blocks = "user", tool_result(message)
        else:
            assert_never(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1][key].extend(blocks)
        else:
            out.append({"role": role, key: blocks})
    return out


def non_empty(content: list[C]) -> list[C]:
    """The content blocks worth sending (providers reject empty text blocks)."""
    return [part for part in content if not (isinstance(part, TextContent) and not part.text)]
