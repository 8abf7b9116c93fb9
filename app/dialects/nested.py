"""What dialects share: the text of content blocks, and a nested loop's trace.

``NestedTrace`` follows the loops that tools run (events with ``depth`` > 0) and keeps, per
depth-0 tool call, the sub-agent's work so far as UI-message-like parts::

    {"type": "nested_run", "parts": [
        {"type": "text", "text": "...", "depth": 1},
        {"type": "tool", "toolCallId": "...", "toolName": "...", "input": {...},
         "state": "input-available" | "output-available" | "output-error",
         "output": "<result text>", "depth": 1}]}

A loop nested two deep is traced under the same depth-0 call (its parts carry ``depth`` 2).
"""

from __future__ import annotations

from typing import Any


def result_text(blocks: list[dict[str, Any]]) -> str:
    """The text blocks of a content list, joined (images and the rest left out)."""
    return "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


class NestedTrace:
    """Nested-loop events → (depth-0 tool call id, its trace so far) at each step."""

    def __init__(self) -> None:
        self._root: dict[str, str] = {}  # nested tool call id → depth-0 call id
        self._parts: dict[str, list[dict[str, Any]]] = {}

    def root_of(self, event: dict[str, Any]) -> str:
        """The depth-0 tool call a nested event belongs to."""
        parent = str(event.get("parent_tool_call_id") or "")
        return self._root.get(parent, parent)

    def feed(self, event: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The depth-0 call and its new trace when ``event`` changed it, else None."""
        root = self.root_of(event)
        kind = event.get("type")
        if kind == "tool_execution_start":
            self._root[event["tool_call_id"]] = root
            return None
        if kind == "message_end" and event["message"].get("role") == "assistant":
            self._add_reply(root, event["message"], int(event["depth"]))
        elif kind == "tool_execution_end":
            self._add_result(root, event)
        else:
            return None
        return root, {"type": "nested_run", "parts": list(self._parts.get(root, []))}

    def _add_reply(self, root: str, message: dict[str, Any], depth: int) -> None:
        parts = self._parts.setdefault(root, [])
        for block in message.get("content") or []:
            if block.get("type") == "text" and block.get("text"):
                parts.append({"type": "text", "text": block["text"], "depth": depth})
            elif block.get("type") == "tool_call":
                parts.append({"type": "tool", "toolCallId": block["id"],
                              "toolName": block["name"], "input": block.get("arguments", {}),
                              "state": "input-available", "depth": depth})

    def _add_result(self, root: str, event: dict[str, Any]) -> None:
        state = "output-error" if event["is_error"] else "output-available"
        text = result_text(event["result"].get("content") or [])
        for i, part in enumerate(self._parts.get(root, [])):
            if part.get("toolCallId") == event["tool_call_id"]:
                self._parts[root][i] = {**part, "state": state, "output": text}
