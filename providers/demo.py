"""The offline demo model (``demo:echo``): deterministic, labelled, and it uses tools.

Used when no provider key is configured, so a new user sees the loop work end to end:

- the last message names a tool on the menu → it calls that tool, with arguments built from the
  tool's JSON Schema (numbers and quoted strings taken from the message, in order);
- the last message is a tool result → it answers from that result;
- otherwise it echoes the message, lists its attachments (kind, media type, name, size or
  URL: nothing is fetched) and says how to get a real model or a tool call.

Every reply starts with ``[demo model]``, except an answer under a response format: that is
one JSON value for its schema, built from the reply it would have given
(``providers._demo_json``), so the offline quick start shows structured output too.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import orjson

from providers._demo_json import Example
from providers.attachments import EVERYTHING, decoded_size
from providers.base import ModelRequest, ToolSpec
from providers.events import (
    DoneEvent,
    ProviderEvent,
    StartEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from providers.messages import (
    Attachment,
    DocumentContent,
    ImageContent,
    Message,
    TextContent,
    ToolResultMessage,
    Usage,
    UserMessage,
)

LABEL = "[demo model]"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'|`([^`]*)`")


class DemoProvider:
    """A deterministic stand-in model that needs no network."""

    name = "demo"
    accepts = EVERYTHING

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Reply to the last message of ``request`` (see module docstring)."""
        return self._reply(request)

    async def _reply(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        yield StartEvent(model=request.model or "echo")
        last = request.messages[-1] if request.messages else None
        usage = Usage(input_tokens=sum(len(_text(m)) for m in request.messages) // 4 + 1)
        tool = None
        if isinstance(last, UserMessage) and request.tool_choice != "none":
            tool = _named_tool(_text(last), request)
        if tool is not None and isinstance(last, UserMessage):
            args = orjson.dumps(arguments_for(tool, _text(last))).decode()
            yield ToolCallStart(0, f"demo_{len(request.messages)}", tool.name)
            for part in _chunks(args, 16):
                yield ToolCallDelta(0, part)
            yield ToolCallEnd(0)
            usage.output_tokens = len(args) // 4 + 1
            yield DoneEvent("tool_use", usage)
            return
        reply = _answer(last, request)
        fmt = request.response_format
        if fmt is not None:
            reply = orjson.dumps(Example(fmt.schema, reply).value(fmt.schema)).decode()
        yield TextStart(0)
        for part in _chunks(reply, 12):
            yield TextDelta(0, part)
        yield TextEnd(0)
        usage.output_tokens = len(reply) // 4 + 1
        yield DoneEvent("stop", usage)


def _answer(last: Message | None, request: ModelRequest) -> str:
    if isinstance(last, ToolResultMessage):
        outcome = "failed" if last.is_error else "returned"
        body = _text(last).strip()
        if len(body) > 600:
            body = body[:600] + "…"
        return f"{LABEL} The tool `{last.tool_name}` {outcome}:\n{body}"
    said = _text(last).strip() if last is not None else ""
    hint = ""
    if request.tools:
        names = ", ".join(f"`{t.name}`" for t in request.tools[:5])
        hint = f" Name a tool ({names}) and I will call it."
    return (f"{LABEL} You said: {said!r}.{_attached(last)} I am the offline demo model: set "
            f"OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY to use a real one.{hint}")


def _attached(message: Message | None) -> str:
    """`` Attached: ...`` naming the message's attachments ("" when it has none)."""
    content = message.content if message is not None else ""
    blocks = [c for c in content if isinstance(c, ImageContent | DocumentContent)] if (
        not isinstance(content, str)) else []
    return " Attached: " + "; ".join(_describe(b) for b in blocks) + "." if blocks else ""


def _describe(block: Attachment) -> str:
    kind = "image" if isinstance(block, ImageContent) else "document"
    if isinstance(block, DocumentContent) and block.name:
        kind += f" {block.name!r}"
    where = f"at {block.url}" if block.url else f"{decoded_size(block.data or '')} bytes"
    return f"{kind} ({block.mime_type or 'type unknown'}, {where})"


def _named_tool(text: str, request: ModelRequest) -> ToolSpec | None:
    choice = request.tool_choice
    if not isinstance(choice, str):  # a forced function
        return next((t for t in request.tools if t.name == choice.name), None)
    found = [(m.start(), t) for t in request.tools
             if (m := re.search(rf"\b{re.escape(t.name)}\b", text))]
    if found:
        return min(found, key=lambda pair: pair[0])[1]
    if choice == "required" and request.tools:
        return request.tools[0]
    return None


def arguments_for(tool: ToolSpec, text: str) -> dict[str, Any]:
    """Arguments that satisfy ``tool``'s schema, filled from numbers and quoted strings."""
    numbers = [float(n) for n in _NUMBER.findall(text)]
    quoted = [next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(text)]
    props: dict[str, Any] = tool.parameters.get("properties", {})
    required = tool.parameters.get("required", list(props))
    args: dict[str, Any] = {}
    for name in required:
        schema = props.get(name, {})
        args[name] = _value(schema, numbers, quoted, name)
    return args


def _value(schema: dict[str, Any], numbers: list[float], quoted: list[str], name: str) -> Any:
    kind = schema.get("type")
    if kind is None and "anyOf" in schema:
        kind = next((s.get("type") for s in schema["anyOf"] if s.get("type") != "null"), None)
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "integer":
        return int(numbers.pop(0)) if numbers else 1
    if kind == "number":
        return numbers.pop(0) if numbers else 1.0
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return quoted.pop(0) if quoted else ("." if "path" in name else "demo")


def _text(message: Message | None) -> str:
    if message is None:
        return ""
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(c.text if isinstance(c, TextContent) else f"[{c.type}]" for c in content)


def _chunks(s: str, size: int) -> list[str]:
    return [s[i:i + size] for i in range(0, len(s), size)] or [""]
