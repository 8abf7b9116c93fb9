"""Anthropic Messages API adapter (``POST {base_url}/v1/messages`` with ``stream: true``).

Request mapping (docs.anthropic.com, "Messages"):

- ``system`` is the top-level ``system`` string; ``max_tokens`` is required by the API and
  defaults to ``DEFAULT_MAX_TOKENS`` when the request leaves it unset.
- Messages alternate user/assistant: tool results become ``tool_result`` blocks (with
  ``is_error``) in a user message, and consecutive same-role messages are merged into one.
- Thinking is replayed as ``thinking``/``redacted_thinking`` blocks only to Anthropic (their
  signatures are Anthropic's); thinking from any other provider is sent as plain text.
- Tool-call ids are rewritten to ``[a-zA-Z0-9_-]{1,64}`` by ``safe_tool_id`` (deterministic).
- ``tool_choice``: auto→``auto``, required→``any``, none→``none``, forced→``tool``;
  ``parallel_tool_calls=False`` adds ``disable_parallel_tool_use``.
- No tools but a history holding ``tool_use``/``tool_result`` blocks (an emptied menu on a
  follow-up): the API rejects that ("Requests which include tool_use or tool_result blocks must
  define tools"), so a stub definition (empty object schema) is sent for each tool the history
  names, with ``tool_choice`` ``none`` so none of them can be called.
- ``response_format``: a ``strict`` one → ``output_config: {format: {type: "json_schema",
  schema}}`` (platform.claude.com, "Structured outputs": constrained decoding, GA for Claude
  Sonnet/Opus 4.5 and later and Haiku 4.5; beside tools in one request). Its decoder takes a
  subset of JSON Schema: a model without the feature, or a schema outside the subset, is the
  API's 400 and the run fails with it. Not ``strict`` → the instruction of
  ``providers._output_format`` appended to ``system`` (any model, any schema).
- ``options`` keys in ``PASSTHROUGH_OPTIONS`` (e.g. ``thinking``) are copied into the body.
- Attachments (``providers.attachments``): images as ``image`` blocks (``base64`` source, or
  ``url`` for an image URL, which Anthropic fetches); a PDF as a ``document`` block (``base64``
  or ``url`` source); a text document as a ``document`` block with a ``text`` source
  (``text/plain``, its URL fetched here first); the block's ``name`` is the document's
  ``title``. Office files are not taken.

The stream is decoded by ``providers._anthropic_stream``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any, assert_never

import httpx
import orjson

from providers._alternate import alternate, non_empty
from providers._anthropic_stream import AnthropicDecoder
from providers._http import RetryPolicy
from providers._output_format import system_with
from providers._prepared import PreparedPost
from providers._stream_guard import guarded_stream
from providers._tool_ids import safe_tool_id
from providers.attachment_fetch import AttachmentFetcher
from providers.attachments import PDF, TEXT_TYPES, Accepts, document_text, inline_urls, left_out
from providers.base import ForcedTool, ModelRequest, ToolChoice
from providers.events import ProviderEvent
from providers.messages import (
    AssistantMessage,
    Attachment,
    DocumentContent,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
)

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 8192
PASSTHROUGH_OPTIONS = ("thinking", "top_p", "top_k", "stop_sequences", "metadata",
                       "service_tier")
_Json = dict[str, Any]
ACCEPTS = Accepts(images=True, urls=True, documents=frozenset({PDF}) | TEXT_TYPES)


class AnthropicProvider:
    """Streams replies from Anthropic's Messages API (``name`` is ``"anthropic"``)."""

    name = "anthropic"
    accepts = ACCEPTS

    def __init__(self, *, client: httpx.AsyncClient, base_url: str = "https://api.anthropic.com",
                 api_key: str, retry: RetryPolicy | None = None,
                 fetcher: AttachmentFetcher | None = None) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + "/v1/messages"
        self._api_key = api_key
        self._retry = retry or RetryPolicy()
        self._fetcher = fetcher or AttachmentFetcher()
        self._post = PreparedPost(client, self._url, {
            "x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json", "accept": "text/event-stream"}, None)

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicProvider(url={self._url!r})"

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the reply to ``request`` (see ``providers.base.Provider``)."""
        async def build() -> httpx.Request:
            messages = await inline_urls(request.messages, self._fetcher.inline, passes_url)
            body = build_body(dataclasses.replace(request, messages=messages))
            return self._post.build(orjson.dumps(body))

        return guarded_stream(label=self.name, model=request.model, client=self._client,
                              build=build, retry=self._retry, decoder=AnthropicDecoder())


def build_body(request: ModelRequest) -> _Json:
    """The JSON body for ``request``."""
    body: _Json = {"model": request.model,
                   "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
                   "stream": True,
                   "messages": convert_messages(request.messages)}
    fmt = request.response_format
    native = fmt is not None and fmt.strict
    if native and fmt is not None:
        body["output_config"] = {"format": {"type": "json_schema", "schema": fmt.schema}}
    system = system_with(request.system, None if native else fmt)
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [{"name": t.name, "description": t.description,
                          "input_schema": t.parameters} for t in request.tools]
        body["tool_choice"] = tool_choice(request.tool_choice, request.parallel_tool_calls)
    elif names := history_tool_names(request.messages):
        body["tools"] = [{"name": name, "input_schema": {"type": "object"}} for name in names]
        body["tool_choice"] = {"type": "none"}
    for key in PASSTHROUGH_OPTIONS:
        if key in request.options:
            body[key] = request.options[key]
    return body


def history_tool_names(messages: list[Message]) -> list[str]:
    """Names of the tools the history's calls and results refer to, in first-seen order."""
    names: dict[str, None] = {}
    for message in messages:
        if isinstance(message, ToolResultMessage):
            names[message.tool_name] = None
        elif isinstance(message, AssistantMessage):
            names.update((call.name, None) for call in message.tool_calls())
    return list(names)


def tool_choice(choice: ToolChoice, parallel: bool | None) -> _Json:
    """The ``tool_choice`` object (``disable_parallel_tool_use`` when parallel is False)."""
    if isinstance(choice, ForcedTool):
        out: _Json = {"type": "tool", "name": choice.name}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    else:
        out = {"type": "auto"}
    if parallel is False:
        out["disable_parallel_tool_use"] = True
    return out


def convert_messages(messages: list[Message]) -> list[_Json]:
    """Neutral history → alternating Anthropic messages (same-role neighbours merged)."""
    return alternate(messages, user=lambda m: _user_blocks(m.content),
                     assistant=_assistant_blocks, tool_result=lambda m: [_tool_result(m)])


def _user_blocks(content: str | list[UserContent]) -> list[_Json]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [_user_block(part) for part in non_empty(content)]


def passes_url(block: Attachment) -> bool:
    """Whether Anthropic fetches the block's URL itself (images and PDFs); other URLs are
    fetched here and sent inline."""
    return isinstance(block, ImageContent) or block.mime_type == PDF


def _user_block(part: UserContent) -> _Json:
    if isinstance(part, ImageContent):
        if part.url:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        return {"type": "image", "source": {"type": "base64", "media_type": part.mime_type,
                                            "data": part.data}}
    if isinstance(part, DocumentContent):
        return _document(part)
    return {"type": "text", "text": part.text}


def _document(part: DocumentContent) -> _Json:
    if part.mime_type == PDF and part.url:
        source: _Json = {"type": "url", "url": part.url}
    elif part.mime_type == PDF:
        source = {"type": "base64", "media_type": PDF, "data": part.data}
    elif part.mime_type in TEXT_TYPES and part.data:
        source = {"type": "text", "media_type": "text/plain", "data": document_text(part)}
    else:
        return {"type": "text", "text": left_out(part, AnthropicProvider.name)}
    block: _Json = {"type": "document", "source": source}
    if part.name:
        block["title"] = part.name
    return block


def _assistant_blocks(message: AssistantMessage) -> list[_Json]:
    native = message.provider == AnthropicProvider.name
    blocks: list[_Json] = []
    for part in message.content:
        if isinstance(part, TextContent):
            if part.text:  # the API rejects empty text blocks
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ThinkingContent):
            blocks.extend(_thinking_block(part, native=native))
        elif isinstance(part, ToolCall):
            blocks.append({"type": "tool_use", "id": safe_tool_id(part.id), "name": part.name,
                           "input": part.arguments})
        else:
            assert_never(part)
    return blocks


def _thinking_block(part: ThinkingContent, *, native: bool) -> list[_Json]:
    if native and part.redacted and part.signature:
        return [{"type": "redacted_thinking", "data": part.signature}]
    if native and part.signature:
        return [{"type": "thinking", "thinking": part.thinking, "signature": part.signature}]
    # foreign (or unsigned, which the API would reject as thinking) reasoning is plain text
    return [{"type": "text", "text": part.thinking}] if part.thinking and not part.redacted else []


def _tool_result(message: ToolResultMessage) -> _Json:
    block: _Json = {"type": "tool_result", "tool_use_id": safe_tool_id(message.tool_call_id),
                    "is_error": message.is_error}
    content = [_user_block(p) for p in non_empty(message.content)]
    if content:
        block["content"] = content
    return block
