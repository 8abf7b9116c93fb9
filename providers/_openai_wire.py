"""Chat Completions wire shapes and the request body built from a ``ModelRequest``.

Mapping choices (the contract ``tests/providers/test_openai_chat.py`` pins down):

- The system prompt is the first message, role ``system`` (OpenAI maps it to ``developer`` for
  reasoning models itself; compatible servers only know ``system``).
- Thinking blocks are dropped from replayed assistant messages, whichever provider made them:
  Chat Completions has no input field for reasoning (DeepSeek's docs ask clients not to send
  ``reasoning_content`` back), and replaying it as text would make the model read its private
  reasoning as something it said.
- ``max_tokens`` is sent under ``max_tokens_field``: ``max_completion_tokens`` for OpenAI itself
  (``max_tokens`` is deprecated there and refused by o-series models), ``max_tokens`` for
  compatible servers (vLLM, Ollama, Groq, OpenRouter all read it).
- ``response_format`` → ``response_format: {type: "json_schema", json_schema: {name, schema,
  strict, description?}}`` on every request, tools or not (Chat Completions takes both: the
  model calls tools or answers in the format); ``strict`` as the run set it.
- ``options`` are merged into the body last, verbatim (``reasoning_effort``, ``top_p`` …).
- Attachments (``providers.attachments``): an image is an ``image_url`` part (its https URL,
  or a ``data:`` URL); with ``pdf`` (OpenAI itself) a PDF is a ``file`` part (``filename``
  and ``file_data``, a ``data:`` URL: Chat Completions takes no file URL, so the adapter
  fetches it first); a text document is a ``text`` part naming it (Chat Completions has no
  text documents). What the server cannot take is a text saying it was left out.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

import orjson

from providers._openai_common import image_url, json_schema, tool_images, tool_output_text
from providers.attachments import PDF, data_url, file_name, text_or_left_out
from providers.base import ForcedTool, ModelRequest, ToolChoice, ToolSpec
from providers.messages import (
    AssistantMessage,
    DocumentContent,
    ImageContent,
    Message,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
    UserMessage,
)


class _FunctionCall(TypedDict):
    name: str
    arguments: str


class WireToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: _FunctionCall


class WireMessage(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None
    tool_calls: NotRequired[list[WireToolCall]]
    tool_call_id: NotRequired[str]


class DeltaToolCall(TypedDict, total=False):
    """One ``choices[].delta.tool_calls[]`` fragment; only ``index`` is always there."""

    index: int
    id: str
    type: str
    function: dict[str, str | None]


def build_body(request: ModelRequest, *, max_tokens_field: str,
               pdf: bool = True) -> dict[str, Any]:
    """The JSON body for ``POST /chat/completions`` with streaming on (``pdf``: the server
    takes PDFs as ``file`` parts)."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": build_messages(request.system, request.messages, pdf=pdf),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [tool_spec(t) for t in request.tools]
        body["tool_choice"] = tool_choice(request.tool_choice)
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body[max_tokens_field] = request.max_tokens
    if request.response_format is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": json_schema(request.response_format)}
    body.update(request.options)
    return body


def tool_spec(tool: ToolSpec) -> dict[str, Any]:
    """A tool as a Chat Completions ``function`` tool."""
    return {"type": "function", "function": {
        "name": tool.name, "description": tool.description, "parameters": tool.parameters}}


def tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """``auto``/``required``/``none`` as is; a forced tool as a ``function`` object."""
    if isinstance(choice, ForcedTool):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


def build_messages(system: str | None, messages: list[Message], *,
                   pdf: bool = True) -> list[WireMessage]:
    """Neutral messages → Chat Completions messages (see the module doc for the choices)."""
    out: list[WireMessage] = []
    if system:
        out.append({"role": "system", "content": system})
    pending: list[ToolResultMessage] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            out.append({"role": "tool", "tool_call_id": message.tool_call_id,
                        "content": tool_output_text(message)})
            pending.append(message)
            continue
        out.extend(_images_message(pending))
        pending = []
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": _user_content(message, pdf=pdf)})
        else:
            out.extend(_assistant(message))
    out.extend(_images_message(pending))
    return out


def _user_content(message: UserMessage, *, pdf: bool) -> str | list[dict[str, Any]]:
    if isinstance(message.content, str):
        return message.content
    return [_part(c, pdf=pdf) for c in message.content]


def _part(block: UserContent, *, pdf: bool = False) -> dict[str, Any]:
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageContent):
        return {"type": "image_url", "image_url": {"url": image_url(block)}}
    return _document(block, pdf=pdf)


def _document(block: DocumentContent, *, pdf: bool) -> dict[str, Any]:
    if pdf and block.mime_type == PDF and block.data:
        return {"type": "file", "file": {"filename": file_name(block),
                                         "file_data": data_url(block)}}
    return {"type": "text", "text": text_or_left_out(block, "this model").text}


def _assistant(message: AssistantMessage) -> list[WireMessage]:
    text = "".join(c.text for c in message.content if isinstance(c, TextContent))
    calls = [_wire_call(c) for c in message.content if isinstance(c, ToolCall)]
    if not text and not calls:
        return []  # thinking only (dropped) or an empty reply: nothing to replay
    wire: WireMessage = {"role": "assistant", "content": text or None}
    if calls:
        wire["tool_calls"] = calls
    return [wire]


def _wire_call(call: ToolCall) -> WireToolCall:
    arguments = orjson.dumps(call.arguments).decode()
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": arguments}}


def _images_message(results: list[ToolResultMessage]) -> list[WireMessage]:
    images = tool_images(results)
    if not images:
        return []
    parts: list[dict[str, Any]] = []
    for call_id, image in images:
        parts.append({"type": "text", "text": f"Image from tool result {call_id}:"})
        parts.append(_part(image))
    return [{"role": "user", "content": parts}]
