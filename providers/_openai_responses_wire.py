"""Responses API request body built from a ``ModelRequest`` (``POST {base_url}/responses``).

Mapping choices (pinned by ``tests/providers/test_openai_responses.py``):

- ``store: false`` and ``include: ["reasoning.encrypted_content"]``: nothing is kept server-side,
  so reasoning is carried in the conversation itself. A reasoning item comes back as
  ``ThinkingContent.signature`` (the item serialized as JSON) and is replayed verbatim, only to the
  provider that produced it (``AssistantMessage.provider == name``). Thinking from any other
  provider is sent as plain assistant text.
- Assistant text and function calls from the same provider keep their item ids (``msg_…`` in
  ``TextContent.signature``, ``fc_…`` in ``ToolCall.signature``): a replayed reasoning item must be
  followed by the items it produced. Ids from other providers are never sent.
- The system prompt is ``instructions``; ``max_tokens`` is ``max_output_tokens``.
- Function tools are sent with ``strict: false``: the Responses API makes ``strict`` default to
  true, which rejects ordinary JSON Schemas (optional properties, no ``additionalProperties``).
- ``response_format`` → ``text: {format: {type: "json_schema", name, schema, strict,
  description?}}`` on every request (the Responses API takes it beside tools).
- ``options`` are merged into the body last; ``reasoning_effort`` (the Chat Completions spelling)
  becomes ``reasoning: {effort, summary: "auto"}`` so one option works for both adapters.
- Attachments (``providers.attachments``): an image is an ``input_image`` (``image_url``: its
  https URL or a ``data:`` URL); every document (PDF, text, office) is an ``input_file``:
  ``file_url`` for a URL (OpenAI fetches it), else ``file_data`` (a ``data:`` URL), with a
  ``filename`` whose extension names its type.
"""

from __future__ import annotations

from typing import Any

import orjson

from providers._openai_common import image_url, json_schema, tool_images, tool_output_text
from providers.attachments import data_url, file_name
from providers.base import ForcedTool, ModelRequest, ToolChoice, ToolSpec
from providers.messages import (
    AssistantMessage,
    DocumentContent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
    UserMessage,
)

Item = dict[str, Any]


def build_body(request: ModelRequest, *, provider: str) -> dict[str, Any]:
    """The JSON body for a streamed, unstored ``POST /responses``."""
    body: dict[str, Any] = {
        "model": request.model,
        "input": build_input(request.messages, provider=provider),
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [tool_spec(t) for t in request.tools]
        body["tool_choice"] = tool_choice(request.tool_choice)
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_output_tokens"] = request.max_tokens
    if request.response_format is not None:
        body["text"] = {"format": {"type": "json_schema",
                                   **json_schema(request.response_format)}}
    options = dict(request.options)
    if "reasoning_effort" in options:
        body["reasoning"] = {"effort": options.pop("reasoning_effort"), "summary": "auto"}
    body.update(options)
    return body


def tool_spec(tool: ToolSpec) -> dict[str, Any]:
    """A tool as a Responses ``function`` tool (flat, not nested under ``function``)."""
    return {"type": "function", "name": tool.name, "description": tool.description,
            "parameters": tool.parameters, "strict": False}


def tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """``auto``/``required``/``none`` as is; a forced tool as ``{"type": "function", name}``."""
    if isinstance(choice, ForcedTool):
        return {"type": "function", "name": choice.name}
    return choice


def build_input(messages: list[Message], *, provider: str) -> list[Item]:
    """Neutral messages → Responses input items."""
    out: list[Item] = []
    pending: list[ToolResultMessage] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            out.append({"type": "function_call_output", "call_id": message.tool_call_id,
                        "output": tool_output_text(message)})
            pending.append(message)
            continue
        out.extend(_images_message(pending))
        pending = []
        if isinstance(message, UserMessage):
            out.append(_user(message.content))
        else:
            out.extend(_assistant(message, same=message.provider == provider))
    out.extend(_images_message(pending))
    return out


def _user(content: str | list[UserContent]) -> Item:
    blocks: list[UserContent] = [TextContent(text=content)] if isinstance(content, str) else content
    return {"role": "user", "content": [_part(b) for b in blocks]}


def _part(block: UserContent) -> Item:
    if isinstance(block, TextContent):
        return {"type": "input_text", "text": block.text}
    if isinstance(block, ImageContent):
        return {"type": "input_image", "image_url": image_url(block)}
    return _file(block)


def _file(block: DocumentContent) -> Item:
    item: Item = {"type": "input_file", "filename": file_name(block)}
    if block.url:
        item["file_url"] = block.url
    else:
        item["file_data"] = data_url(block)
    return item


def _assistant(message: AssistantMessage, *, same: bool) -> list[Item]:
    out: list[Item] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            out.extend(_thinking(block, same=same))
        elif isinstance(block, TextContent):
            out.append(_text(block.text, block.signature if same else None))
        else:
            out.append(_call(block, same=same))
    return out


def _thinking(block: ThinkingContent, *, same: bool) -> list[Item]:
    if same:
        if not block.signature:
            return []  # our own reasoning without its item (e.g. an aborted reply)
        item: Item = orjson.loads(block.signature)
        return [item]
    if block.redacted or not block.thinking:
        return []
    return [_text(block.thinking, None)]


def _text(text: str, item_id: str | None) -> Item:
    if item_id is None:
        return {"role": "assistant", "content": text}
    return {"type": "message", "role": "assistant", "id": item_id, "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _call(call: ToolCall, *, same: bool) -> Item:
    item: Item = {"type": "function_call", "call_id": call.id, "name": call.name,
                  "arguments": orjson.dumps(call.arguments).decode()}
    if same and call.signature:
        item["id"] = call.signature
    return item


def _images_message(results: list[ToolResultMessage]) -> list[Item]:
    images = tool_images(results)
    if not images:
        return []
    parts: list[Item] = []
    for call_id, image in images:
        parts.append({"type": "input_text", "text": f"Image from tool result {call_id}:"})
        parts.append(_part(image))
    return [{"role": "user", "content": parts}]
