"""Neutral request → Bedrock ``ConverseStream`` JSON body.

Mapping (docs.aws.amazon.com, ``Converse`` / ``ConverseStream`` request syntax):

- ``system`` → ``[{"text": …}]``; ``max_tokens``/``temperature`` → ``inferenceConfig``;
  ``options["additionalModelRequestFields"]`` (e.g. Claude ``thinking``) is passed through.
- Messages alternate ``user``/``assistant`` (same-role neighbours merged). Content blocks:
  ``text``, ``image`` (``format`` + base64 ``source.bytes``), ``toolUse``, ``toolResult``
  (``status`` ``error``/``success``; an empty result is sent as ``"(no output)"`` because blank
  text is rejected) and ``reasoningContent`` — the latter only for messages that came from
  Bedrock; other providers' thinking is sent as text.
- Tool-use ids are rewritten to ``[a-zA-Z0-9_-]{1,64}`` by ``safe_tool_id``.
- ``toolChoice``: auto→``{"auto":{}}``, required→``{"any":{}}``, forced X→``{"tool":{"name":X}}``.
  ``none`` withholds the tools — except when the history holds ``toolUse``/``toolResult``
  blocks, which Bedrock rejects without a ``toolConfig``: then the specs are sent with no
  ``toolChoice``. ``parallel_tool_calls`` has no Converse equivalent and is ignored.
- ``response_format``: a ``strict`` one → ``outputConfig.textFormat: {type: "json_schema",
  structure: {jsonSchema: {schema: <the schema as a JSON string>, name, description?}}}``
  (``OutputConfig``, ``JsonSchemaDefinition``: constrained decoding, beside ``toolConfig``
  allowed). Only some models have it: another model, or a schema outside the subset Bedrock
  compiles, is its ``ValidationException`` and the run fails with it. Not ``strict`` → the
  instruction of ``providers._output_format`` appended to ``system`` (any model).
"""

from __future__ import annotations

from typing import Any, assert_never

import orjson

from providers._alternate import alternate, non_empty
from providers._output_format import system_with
from providers._tool_ids import safe_tool_id
from providers.base import ForcedTool, ModelRequest, ResponseFormat
from providers.messages import (
    AssistantMessage,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
)

PROVIDER_NAME = "bedrock"
_Json = dict[str, Any]


def build_body(request: ModelRequest) -> _Json:
    """The JSON body for ``request``."""
    body: _Json = {"messages": convert_messages(request.messages)}
    fmt = request.response_format
    native = fmt is not None and fmt.strict
    if native and fmt is not None:
        body["outputConfig"] = {"textFormat": text_format(fmt)}
    system = system_with(request.system, None if native else fmt)
    if system:
        body["system"] = [{"text": system}]
    inference: _Json = {}
    if request.max_tokens is not None:
        inference["maxTokens"] = request.max_tokens
    if request.temperature is not None:
        inference["temperature"] = request.temperature
    if inference:
        body["inferenceConfig"] = inference
    config = tool_config(request)
    if config is not None:
        body["toolConfig"] = config
    if "additionalModelRequestFields" in request.options:
        body["additionalModelRequestFields"] = request.options["additionalModelRequestFields"]
    return body


def text_format(fmt: ResponseFormat) -> _Json:
    """``outputConfig.textFormat`` for a strict response format (the schema is a string)."""
    definition: _Json = {"schema": orjson.dumps(fmt.schema).decode(), "name": fmt.name}
    if fmt.description:
        definition["description"] = fmt.description
    return {"type": "json_schema", "structure": {"jsonSchema": definition}}


def tool_config(request: ModelRequest) -> _Json | None:
    """``toolConfig``, or None when no tools are to be sent (see the module docstring)."""
    if not request.tools:
        return None
    specs = [{"toolSpec": {"name": t.name, "description": t.description,
                           "inputSchema": {"json": t.parameters}}} for t in request.tools]
    choice = request.tool_choice
    if choice == "none":
        return {"tools": specs} if _history_uses_tools(request.messages) else None
    if isinstance(choice, ForcedTool):
        wire: _Json = {"tool": {"name": choice.name}}
    else:
        wire = {"any": {}} if choice == "required" else {"auto": {}}
    return {"tools": specs, "toolChoice": wire}


def _history_uses_tools(messages: list[Message]) -> bool:
    return any(isinstance(m, ToolResultMessage)
               or (isinstance(m, AssistantMessage) and m.tool_calls()) for m in messages)


def convert_messages(messages: list[Message]) -> list[_Json]:
    """Neutral history → alternating Converse messages."""
    return alternate(messages, user=lambda m: _user_blocks(m.content),
                     assistant=_assistant_blocks, tool_result=lambda m: [_tool_result(m)])


def _user_blocks(content: str | list[UserContent]) -> list[_Json]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [_user_block(p) for p in non_empty(content)]


def _user_block(part: UserContent) -> _Json:
    if isinstance(part, ImageContent):
        fmt = part.mime_type.rpartition("/")[2].lower().replace("jpg", "jpeg")
        return {"image": {"format": fmt, "source": {"bytes": part.data}}}
    return {"text": part.text}


def _assistant_blocks(message: AssistantMessage) -> list[_Json]:
    native = message.provider == PROVIDER_NAME
    blocks: list[_Json] = []
    for part in message.content:
        if isinstance(part, TextContent):
            if part.text:
                blocks.append({"text": part.text})
        elif isinstance(part, ThinkingContent):
            blocks.extend(_reasoning_block(part, native=native))
        elif isinstance(part, ToolCall):
            blocks.append({"toolUse": {"toolUseId": safe_tool_id(part.id), "name": part.name,
                                       "input": part.arguments}})
        else:
            assert_never(part)
    return blocks


def _reasoning_block(part: ThinkingContent, *, native: bool) -> list[_Json]:
    if native and part.redacted and part.signature:
        return [{"reasoningContent": {"redactedContent": part.signature}}]
    if native and part.signature:
        return [{"reasoningContent": {"reasoningText": {"text": part.thinking,
                                                        "signature": part.signature}}}]
    return [{"text": part.thinking}] if part.thinking and not part.redacted else []


def _tool_result(message: ToolResultMessage) -> _Json:
    content = [_user_block(p) for p in non_empty(message.content)]
    return {"toolResult": {"toolUseId": safe_tool_id(message.tool_call_id),
                           "content": content or [{"text": "(no output)"}],
                           "status": "error" if message.is_error else "success"}}
