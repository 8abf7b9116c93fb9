"""An MCP ``tools/call`` result as our ``ToolResult``: text stays text, images stay images,
everything else becomes a line of text the model can read (audio and binary resources by
their kind and size, resource links by name and URI); ``structuredContent`` goes to the
model as JSON when the server sent no content for it, and always to ``details``."""

from __future__ import annotations

from typing import Any

import orjson
from mcp import types

from providers.messages import ImageContent, TextContent
from tool_registry.types import ToolResult

Block = TextContent | ImageContent


def to_result(result: types.CallToolResult) -> ToolResult:
    """The model's view (``content``) and the client's (``details``) of one call's result."""
    content: list[Block] = [_block(item) for item in result.content]
    structured = result.structuredContent
    if structured is not None and not any(isinstance(b, TextContent) for b in content):
        content.insert(0, TextContent(text=orjson.dumps(structured).decode()))
    if not content:
        content = [TextContent(text="(no output)")]
    details: dict[str, Any] | None = None
    if structured is not None:
        details = {"structured": structured}
    return ToolResult(content=content, details=details, is_error=bool(result.isError))


def _block(item: types.ContentBlock) -> Block:
    if isinstance(item, types.TextContent):
        return TextContent(text=item.text)
    if isinstance(item, types.ImageContent):
        return ImageContent(data=item.data, mime_type=item.mimeType)
    if isinstance(item, types.AudioContent):
        return TextContent(text=f"[audio {item.mimeType}, {len(item.data) * 3 // 4} bytes]")
    if isinstance(item, types.ResourceLink):
        about = f" ({item.mimeType})" if item.mimeType else ""
        text = f" - {item.description}" if item.description else ""
        return TextContent(text=f"[resource link] {item.name}: {item.uri}{about}{text}")
    resource = item.resource
    if isinstance(resource, types.TextResourceContents):
        return TextContent(text=f"[resource {resource.uri}]\n{resource.text}")
    size = len(resource.blob) * 3 // 4
    return TextContent(text=f"[resource {resource.uri}: {resource.mimeType or 'binary'}, "
                            f"{size} bytes]")
