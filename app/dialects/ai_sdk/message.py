"""UI message chunks → the ``UIMessage`` they build, as the SDK's ``readUIMessageStream`` does
(``ai`` 7, ``src/ui/process-ui-message-stream.ts``): the server's copy of what a page showed,
for ``GET /ai-sdk/chat/{id}/messages`` (``app.dialects.ai_sdk.history``).

Only the chunks ``UIMessageProjector`` sends are handled (text, reasoning, tool parts in every
state, steering messages, data parts, steps and metadata); a part's fields are those the SDK
sets, with the keys it leaves undefined left out, so a history read equals (as JSON) the
message ``useChat`` built live. A tool part is looked up in the current step first (after the
last ``step-start``), then anywhere, as the SDK does.
"""

from __future__ import annotations

from typing import Any

from providers.partial_json import parse_partial_object

_STATE_FIELDS = ("input", "output", "errorText", "rawInput", "preliminary")
"""The fields each tool-part update sets (or clears) as a whole, as the SDK's
``updateToolPart`` does."""


class UIMessageBuilder:
    """Feed chunks in stream order; ``message`` is the assistant ``UIMessage`` so far."""

    def __init__(self, message_id: str = "") -> None:
        self.message: dict[str, Any] = {"id": message_id, "role": "assistant", "parts": []}
        self._active: dict[str, dict[str, Any]] = {}  # text / reasoning parts by chunk id
        self._raw: dict[str, str] = {}  # a streaming tool call's input text

    def feed(self, chunk: dict[str, Any]) -> None:
        """Apply one chunk."""
        kind = str(chunk.get("type"))
        if kind.startswith("data-"):
            self._data(chunk)
        elif kind in ("start", "finish", "message-metadata"):
            self._start(chunk) if kind == "start" else None
            self._metadata(chunk.get("messageMetadata"))
        elif kind == "start-step":
            self._parts.append({"type": "step-start"})
        elif kind == "reset-step":  # the current step's parts go (the SDK's reset-step)
            del self._parts[len(self._parts) - len(self._step()):]
            self._active, self._raw = {}, {}
        elif kind.endswith(("-start", "-delta", "-end")) and kind.split("-")[0] in (
                "text", "reasoning"):
            self._block(kind, chunk)
        elif kind == "steering-message":
            self._parts.append({"type": "steering-message", "id": chunk["id"],
                                "parts": chunk["parts"]})
        elif kind.startswith("tool-"):
            self._tool(kind, chunk)

    @property
    def _parts(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = self.message["parts"]
        return parts

    def _start(self, chunk: dict[str, Any]) -> None:
        if chunk.get("messageId"):
            self.message["id"] = chunk["messageId"]

    def _metadata(self, metadata: Any) -> None:
        if metadata is None:
            return
        current = self.message.get("metadata")
        self.message["metadata"] = merge(current, metadata) if current is not None else metadata

    def _block(self, kind: str, chunk: dict[str, Any]) -> None:
        part_type, _, step = kind.partition("-")
        if step == "start":
            part = {"type": part_type, "text": "", "state": "streaming"}
            if chunk.get("providerMetadata") is not None:
                part["providerMetadata"] = chunk["providerMetadata"]
            self._active[f"{part_type}:{chunk['id']}"] = part
            self._parts.append(part)
            return
        part = self._active[f"{part_type}:{chunk['id']}"]
        if step == "delta":
            part["text"] += chunk["delta"]
        else:
            part["state"] = "done"
            del self._active[f"{part_type}:{chunk['id']}"]
        if chunk.get("providerMetadata") is not None:
            part["providerMetadata"] = chunk["providerMetadata"]

    def _data(self, chunk: dict[str, Any]) -> None:
        if chunk.get("transient"):
            return
        if chunk.get("id") is not None:
            for part in self._parts:
                if part.get("type") == chunk["type"] and part.get("id") == chunk["id"]:
                    part["data"] = chunk["data"]
                    return
        self._parts.append(dict(chunk))

    def _tool(self, kind: str, chunk: dict[str, Any]) -> None:
        call_id = chunk["toolCallId"]
        if kind == "tool-input-start":
            self._raw[call_id] = ""
            self._update(chunk, "input-streaming", {"input": None})
        elif kind == "tool-input-delta":
            self._raw[call_id] = self._raw.get(call_id, "") + chunk["inputTextDelta"]
            self._update(chunk, "input-streaming", {
                "input": parse_partial_object(self._raw[call_id]),
                "rawInput": self._raw[call_id]})
        elif kind == "tool-input-available":
            self._update(chunk, "input-available", {"input": chunk.get("input")})
        elif kind == "tool-input-error":
            self._update(chunk, "output-error", {"input": chunk.get("input"),
                                                 "errorText": chunk.get("errorText")})
        elif kind == "tool-approval-request":
            part = self._invocation(call_id)
            part["state"], part["approval"] = "approval-requested", {"id": chunk["approvalId"]}
        elif kind == "tool-output-denied":
            self._invocation(call_id)["state"] = "output-denied"
        elif kind in ("tool-output-available", "tool-output-error"):
            part = self._invocation(call_id)
            values = {"input": part.get("input"), "preliminary": chunk.get("preliminary")}
            if kind == "tool-output-available":
                values["output"] = chunk.get("output")
            else:
                values["errorText"], values["rawInput"] = chunk["errorText"], part.get("rawInput")
            self._update(chunk, kind.removeprefix("tool-"), values, part)

    def _update(self, chunk: dict[str, Any], state: str, values: dict[str, Any],
                part: dict[str, Any] | None = None) -> None:
        """The SDK's ``updateToolPart``: set a part's state and its state's fields."""
        call_id = chunk["toolCallId"]
        part = part or next((p for p in self._step() if _is_tool(p)
                             and p.get("toolCallId") == call_id), None)
        if part is None:
            part = {"type": f"tool-{chunk['toolName']}", "toolCallId": call_id}
            self._parts.append(part)
        elif chunk.get("toolName"):
            part["type"] = f"tool-{chunk['toolName']}"
        part["state"] = state
        for name in _STATE_FIELDS:
            part.pop(name, None)
        part.update({k: v for k, v in values.items() if v is not None})
        executed = chunk.get("providerExecuted", part.get("providerExecuted"))
        if executed is not None:
            part["providerExecuted"] = executed

    def _invocation(self, call_id: str) -> dict[str, Any]:
        """The tool part of ``call_id``: in the current step, else the latest anywhere."""
        for part in [*self._step(), *reversed(self._parts)]:
            if _is_tool(part) and part.get("toolCallId") == call_id:
                found: dict[str, Any] = part
                return found
        raise KeyError(call_id)

    def _step(self) -> list[dict[str, Any]]:
        """The parts after the last ``step-start``."""
        starts = [i for i, p in enumerate(self._parts) if p.get("type") == "step-start"]
        return self._parts[starts[-1] + 1:] if starts else self._parts


def _is_tool(part: dict[str, Any]) -> bool:
    kind = str(part.get("type"))
    return kind.startswith("tool-") or kind == "dynamic-tool"


def merge(base: Any, overrides: Any) -> Any:
    """The SDK's ``mergeObjects``: objects merged deeply, anything else replaced."""
    if not (isinstance(base, dict) and isinstance(overrides, dict)):
        return overrides
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merge(out.get(key), value) if isinstance(out.get(key), dict) else value
    return out
