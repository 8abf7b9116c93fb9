"""Our messages as AG-UI messages (``MESSAGES_SNAPSHOT``), under the ids the stream used."""

from __future__ import annotations

from typing import Any

import orjson

from app.dialects.nested import result_text


def result_message_id(tool_call_id: str) -> str:
    """The id of a tool call's result message (``TOOL_CALL_RESULT.messageId``)."""
    return f"{tool_call_id}-result"


def to_ag_ui(message: dict[str, Any], message_id: str) -> dict[str, Any] | None:
    """One of our messages as an AG-UI message (None for one with nothing to show)."""
    role = message.get("role")
    if role == "user":
        content = message["content"]
        text = content if isinstance(content, str) else result_text(content)
        return {"id": message.get("id") or message_id, "role": "user", "content": text}
    if role == "tool_result":
        return {"id": result_message_id(message["tool_call_id"]), "role": "tool",
                "toolCallId": message["tool_call_id"],
                "content": result_text(message.get("content") or [])}
    if role == "assistant":
        return _assistant(message, message_id)
    return None


def _assistant(message: dict[str, Any], message_id: str) -> dict[str, Any]:
    blocks = message.get("content") or []
    out: dict[str, Any] = {"id": message_id, "role": "assistant"}
    text = result_text(blocks)
    if text:
        out["content"] = text
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"],
                           "arguments": orjson.dumps(b.get("arguments", {})).decode()}}
             for b in blocks if b.get("type") == "tool_call"]
    if calls:
        out["toolCalls"] = calls
    return out


def history(messages: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """A run's stored input as AG-UI messages (for a reconnect): a user message under the
    client's own id, the others (and a user message sent without one) ``<run id>-in-<i>``."""
    out = []
    for i, message in enumerate(messages):
        converted = to_ag_ui(message, f"{run_id}-in-{i}")
        if converted is not None:
            out.append(converted)
    return out
