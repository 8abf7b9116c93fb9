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
- Attachments (``providers.attachments``): ``image`` blocks take bytes only (``format``
  png/jpeg/gif/webp), so the adapter fetches an image URL first (under the SSRF guard); every
  document (PDF, text, office) is a ``document`` block with its ``format`` (pdf, txt, md, csv,
  html, doc, docx, xls, xlsx), its bytes, and a ``name`` made to Bedrock's rules
  (``document_name``: letters, digits, single spaces, hyphens, parentheses and square
  brackets, at most 200 characters, unique in the request). A user message holding a document
  but no text gets a short text block, which Converse requires beside documents.
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

import re
from typing import Any, assert_never

import orjson

from providers._alternate import alternate, non_empty
from providers._output_format import system_with
from providers._tool_ids import safe_tool_id
from providers.attachments import DOCUMENT_TYPES, EXTENSIONS, IMAGE_TYPES, left_out
from providers.base import ForcedTool, ModelRequest, ResponseFormat
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
)

PROVIDER_NAME = "bedrock"
_Json = dict[str, Any]
_NAME_REFUSED = re.compile(r"[^A-Za-z0-9\s()\[\]-]+")
NAME_MAX = 200
DOCUMENTS_NEED_TEXT = "(the attached documents)"


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
    """Neutral history → alternating Converse messages (documents named uniquely, each
    message with a document holding some text)."""
    converted = alternate(messages, user=lambda m: _user_blocks(m.content),
                          assistant=_assistant_blocks, tool_result=lambda m: [_tool_result(m)])
    taken: set[str] = set()
    for message in converted:
        documents = [b["document"] for b in message["content"] if "document" in b]
        for document in documents:
            document["name"] = _unique(document["name"], taken)
        if documents and not any("text" in b for b in message["content"]):
            message["content"].append({"text": DOCUMENTS_NEED_TEXT})
    return converted


def document_name(name: str | None) -> str:
    """A document name Bedrock takes: the file name without its directories and extension,
    every run of other characters (and of whitespace) one space, at most ``NAME_MAX``
    characters (``document`` when nothing is left)."""
    stem = (name or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    if "." in stem.lstrip("."):
        stem = stem.rsplit(".", 1)[0]
    cleaned = " ".join(_NAME_REFUSED.sub(" ", stem).split())[:NAME_MAX].strip()
    return cleaned or "document"


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f" ({n})"
        candidate = name[:NAME_MAX - len(suffix)].rstrip() + suffix
    taken.add(candidate)
    return candidate


def _user_blocks(content: str | list[UserContent]) -> list[_Json]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [_user_block(p) for p in non_empty(content)]


def _user_block(part: UserContent) -> _Json:
    if isinstance(part, TextContent):
        return {"text": part.text}
    mime = (part.mime_type or "").lower().replace("image/jpg", "image/jpeg")
    if isinstance(part, ImageContent) and part.data and mime in IMAGE_TYPES:
        return {"image": {"format": EXTENSIONS[mime], "source": {"bytes": part.data}}}
    if isinstance(part, DocumentContent) and part.data and mime in DOCUMENT_TYPES:
        return {"document": {"format": EXTENSIONS[mime], "name": document_name(part.name),
                             "source": {"bytes": part.data}}}
    return {"text": left_out(part, PROVIDER_NAME)}


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
