"""Google Gemini API adapter (``POST {base_url}/v1beta/models/{model}:streamGenerateContent``).

The key travels in the ``x-goog-api-key`` header, never in the URL, so it cannot leak into
access logs or exception messages. Request mapping (ai.google.dev, "Function calling",
"Thought signatures"):

- ``system`` → ``systemInstruction``; messages → ``contents`` with role ``user``/``model``
  (same-role neighbours merged).
- Attachments (``providers.attachments``): images, PDFs and text documents → ``inlineData``
  with their media type (``text/markdown`` as ``text/plain``: Gemini reads every non-PDF
  document as plain text). ``fileData.fileUri`` takes only the File API's own URIs, so a URL
  is fetched here first (under the SSRF guard) and sent inline. Office files are not taken.
- Assistant text, thinking (``thought: true``) and ``functionCall`` parts carry their
  ``thoughtSignature`` back only when the message came from Gemini; thinking from any other
  provider is sent as plain text.
- Gemini 3 rejects a history whose step opens with a ``functionCall`` that has no signature
  (ai.google.dev, "Thought signatures": only the first call of a step carries one, and calls
  that did not come from Gemini get the documented dummy ``SKIP_SIGNATURE``). So the first
  ``functionCall`` of each assistant message without a Gemini signature is sent with it.
- Tool results → ``functionResponse`` parts (role ``user``) with ``response`` ``{"output": text}``,
  or ``{"error": text}`` when ``is_error``. Calls and responses are paired by name and order;
  ids are not sent back because Gemini omits them on most models and ids generated here would
  mean nothing to it.
- Tools → ``[{"functionDeclarations": [...]}]`` with the schema in ``parametersJsonSchema``
  (full JSON Schema, so no cleaning to the OpenAPI subset of ``parameters`` is needed).
- ``tool_choice`` → ``toolConfig.functionCallingConfig``: auto→AUTO, required→ANY, none→NONE,
  forced X→ANY with ``allowedFunctionNames: [X]``. ``parallel_tool_calls`` has no Gemini
  equivalent and is ignored.
- ``temperature``/``max_tokens`` → ``generationConfig``; ``options["thinkingConfig"]`` (and the
  other ``PASSTHROUGH_GENERATION`` keys) are copied into it.
- ``response_format`` on a request that offers no tools → ``generationConfig.responseMimeType:
  "application/json"`` and ``responseJsonSchema`` (full JSON Schema; ``responseSchema`` takes
  only the OpenAPI subset). Gemini models before 3 refuse a JSON response MIME type beside
  function calling, so a request offering tools states the format in ``systemInstruction``
  instead (``providers._output_format``). ``strict`` has no Gemini switch.

The stream is decoded by ``providers._gemini_stream``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any, assert_never
from urllib.parse import quote

import httpx
import orjson

from providers._alternate import alternate, non_empty
from providers._gemini_stream import GeminiDecoder
from providers._http import RetryPolicy
from providers._output_format import system_with
from providers._prepared import PreparedPost
from providers._stream_guard import guarded_stream
from providers.attachment_fetch import AttachmentFetcher
from providers.attachments import PDF, TEXT_TYPES, Accepts, inline_urls, left_out
from providers.base import ForcedTool, ModelRequest, ToolChoice
from providers.events import ProviderEvent
from providers.messages import (
    AssistantMessage,
    Attachment,
    ImageContent,
    Message,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserContent,
)

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""Google's documented stand-in signature for function calls it did not produce."""
PASSTHROUGH_GENERATION = ("thinkingConfig", "topP", "topK", "stopSequences", "seed")
_Json = dict[str, Any]
ACCEPTS = Accepts(images=True, urls=True, documents=frozenset({PDF}) | TEXT_TYPES)
MAX_PREPARED = 64
"""Models whose prepared POST a provider keeps (past it they are prepared again)."""
_INLINE_TYPES = {"text/markdown": "text/plain"}


class GeminiProvider:
    """Streams replies from the Gemini API (``name`` is ``"gemini"``)."""

    name = "gemini"
    accepts = ACCEPTS

    def __init__(self, *, client: httpx.AsyncClient,
                 base_url: str = "https://generativelanguage.googleapis.com",
                 api_key: str, retry: RetryPolicy | None = None,
                 fetcher: AttachmentFetcher | None = None) -> None:
        self._client = client
        self._base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._retry = retry or RetryPolicy()
        self._fetcher = fetcher or AttachmentFetcher()
        self._posts: dict[str, PreparedPost] = {}
        """model → its prepared POST (a deployment names a handful of models)."""

    def __repr__(self) -> str:  # never show the key
        return f"GeminiProvider(base_url={self._base_url!r})"

    def _post(self, model: str) -> PreparedPost:
        post = self._posts.get(model)
        if post is None:
            if len(self._posts) >= MAX_PREPARED:
                self._posts.clear()
            url = f"{self._base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse"
            post = self._posts[model] = PreparedPost(self._client, url, {
                "x-goog-api-key": self._api_key, "content-type": "application/json",
                "accept": "text/event-stream"}, None)
        return post

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        """Stream the reply to ``request`` (see ``providers.base.Provider``)."""
        post = self._post(quote(request.model.removeprefix("models/"), safe=""))

        async def build() -> httpx.Request:
            messages = await inline_urls(request.messages, self._fetcher.inline, _never)
            body = build_body(dataclasses.replace(request, messages=messages))
            return post.build(orjson.dumps(body))

        return guarded_stream(label=self.name, model=request.model, client=self._client,
                              build=build, retry=self._retry, decoder=GeminiDecoder())


def build_body(request: ModelRequest) -> _Json:
    """The JSON body for ``request``."""
    body: _Json = {"contents": convert_contents(request.messages)}
    fmt = request.response_format
    native = fmt is not None and not request.tools
    system = system_with(request.system, None if native else fmt)
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [
            {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}
            for t in request.tools]}]
        body["toolConfig"] = {"functionCallingConfig": calling_config(request.tool_choice)}
    generation: _Json = {}
    if native and fmt is not None:
        generation.update(responseMimeType="application/json", responseJsonSchema=fmt.schema)
    if request.temperature is not None:
        generation["temperature"] = request.temperature
    if request.max_tokens is not None:
        generation["maxOutputTokens"] = request.max_tokens
    for key in PASSTHROUGH_GENERATION:
        if key in request.options:
            generation[key] = request.options[key]
    if generation:
        body["generationConfig"] = generation
    return body


def calling_config(choice: ToolChoice) -> _Json:
    """``functionCallingConfig`` for a neutral ``tool_choice``."""
    if isinstance(choice, ForcedTool):
        return {"mode": "ANY", "allowedFunctionNames": [choice.name]}
    return {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[choice]}


def convert_contents(messages: list[Message]) -> list[_Json]:
    """Neutral history → Gemini ``contents`` (same-role neighbours merged)."""
    return alternate(messages, user=lambda m: _user_parts(m.content), assistant=_model_parts,
                     tool_result=_response_parts, model_role="model", key="parts")


def _user_parts(content: str | list[UserContent]) -> list[_Json]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [_user_part(p) for p in non_empty(content)]


def _never(block: Attachment) -> bool:
    """No URL goes to Gemini as is: each is fetched and sent inline."""
    return False


def _user_part(part: UserContent) -> _Json:
    if isinstance(part, TextContent):
        return {"text": part.text}
    takes = isinstance(part, ImageContent) or part.mime_type == PDF or part.mime_type in TEXT_TYPES
    if not (takes and part.data):
        return {"text": left_out(part, GeminiProvider.name)}
    mime = part.mime_type or ""
    return {"inlineData": {"mimeType": _INLINE_TYPES.get(mime, mime), "data": part.data}}


def _model_parts(message: AssistantMessage) -> list[_Json]:
    native = message.provider == GeminiProvider.name
    parts: list[_Json] = []
    for block in message.content:
        if isinstance(block, TextContent):
            keep = block.text or (native and block.signature)
            part: _Json | None = {"text": block.text} if keep else None
        elif isinstance(block, ThinkingContent):
            part = _thinking_part(block, native=native)
        elif isinstance(block, ToolCall):
            part = {"functionCall": {"name": block.name, "args": block.arguments}}
        else:
            assert_never(block)
        if part is not None:
            if native and block.signature:
                part["thoughtSignature"] = block.signature
            parts.append(part)
    calls = [part for part in parts if "functionCall" in part]
    if calls:
        calls[0].setdefault("thoughtSignature", SKIP_SIGNATURE)
    return parts


def _thinking_part(block: ThinkingContent, *, native: bool) -> _Json | None:
    if block.redacted or not (block.thinking or (native and block.signature)):
        return None
    return {"text": block.thinking, "thought": True} if native else {"text": block.thinking}


def _response_parts(message: ToolResultMessage) -> list[_Json]:
    text = "\n".join(p.text for p in message.content if isinstance(p, TextContent))
    key = "error" if message.is_error else "output"
    response = {"functionResponse": {"name": message.tool_name, "response": {key: text}}}
    images = [_user_part(p) for p in message.content if isinstance(p, ImageContent)]
    return [response, *images]
