"""The toolkits' attachments as our image and document blocks (``providers.messages``).

- AI SDK ``file`` parts (``{type: "file", mediaType, url, filename?}``): ``url`` is a base64
  ``data:`` URL (the bytes) or an ``https://`` URL (a reference); an ``image/*`` ``mediaType``
  makes an image block, any other a document block named by ``filename``.
- AG-UI (``@ag-ui/core`` 1.0) ``image`` and ``document`` parts: a ``data`` source (base64
  ``value`` and ``mimeType``) or a ``url`` source; a document's name is its ``metadata``'s
  ``filename`` (or ``name``). ``file`` sources (a provider's own file handle) and ``audio`` and
  ``video`` parts are refused.

Only the shape is read here: which media types, sizes and URLs are accepted, and what the
run's model takes, the run pipeline checks (``app.api.attachment_checks``) for every door;
``ai_sdk_names`` and ``ag_ui_names`` name its fields as the toolkit's client sent them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from app.api.errors import ApiError

_CONTENT_FIELD = re.compile(r"^input\[0\]\.content\[(\d+)\](.*)$")
_AI_SDK_FIELDS = {".data": ".url", ".url": ".url", ".mime_type": ".mediaType",
                  ".name": ".filename", ".text": ".text"}
_AG_UI_FIELDS = {".data": ".source.value", ".url": ".source.value",
                 ".mime_type": ".source.mimeType", ".name": ".metadata.filename",
                 ".text": ".text"}
AI_SDK_CONTENT_PARTS = frozenset({"text", "file"})
"""The AI SDK parts of a user message that become content blocks (in order)."""


def _invalid(field: str, problem: str) -> ApiError:
    return ApiError(422, "validation_error", f"{field}: {problem}", field)


def _block(kind: str, media_type: str, source: dict[str, str],
           name: object = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": kind, "mime_type": media_type, **source}
    if kind == "document" and isinstance(name, str) and name:
        block["name"] = name
    return block


def from_ai_sdk_file(part: dict[str, Any], field: str) -> dict[str, Any]:
    """An AI SDK ``file`` part as an image or document block; 422 naming ``field.url`` or
    ``field.mediaType`` for a part of the wrong shape."""
    url, media_type = part.get("url"), part.get("mediaType")
    if not isinstance(url, str):
        raise _invalid(f"{field}.url", "must be a data: URL (base64) or an https:// URL")
    if url.startswith("data:"):
        head, comma, data = url.partition(",")
        if not (comma and head.endswith(";base64")):
            raise _invalid(f"{field}.url", "a data: URL must be base64 "
                           "(data:<media type>;base64,<data>)")
        source = {"data": data}
        media_type = media_type or head[5:-7]
    elif url[:8].lower() == "https://":
        source = {"url": url}
    else:
        raise _invalid(f"{field}.url", "must be a data: URL (base64) or an https:// URL")
    if not (isinstance(media_type, str) and media_type.strip()):
        raise _invalid(f"{field}.mediaType", "required: the file's media type")
    media_type = media_type.split(";")[0].strip().lower()
    kind = "image" if media_type.startswith("image/") else "document"
    return _block(kind, media_type, source, part.get("filename"))


def from_ag_ui_part(part: dict[str, Any], field: str) -> dict[str, Any]:
    """An AG-UI ``image`` or ``document`` part as our block; 422 naming the field for another
    kind of part or source."""
    kind = part.get("type")
    if kind not in ("image", "document"):
        raise _invalid(field, "only text, image and document parts are accepted")
    source = part.get("source") or {}
    value, media_type = source.get("value"), source.get("mimeType")
    if source.get("type") not in ("data", "url") or not isinstance(value, str):
        raise _invalid(f"{field}.source", "a data or url source (a provider's file handle "
                       "cannot be used here)")
    given = {"data": value} if source["type"] == "data" else {"url": value}
    if not isinstance(media_type, str):
        media_type = None
    metadata = part.get("metadata")
    name = (metadata.get("filename") or metadata.get("name")) if isinstance(
        metadata, dict) else None
    block = _block(str(kind), media_type or "", given, name)
    if media_type is None:
        del block["mime_type"]  # an image URL may leave it out; the pipeline says the rest
    return block


def ai_sdk_names(last: int, parts: list[Any]) -> Callable[[str], str]:
    """The AI SDK request's name of a pipeline field: a block of the posted message is the
    part it came from (``messages[3].parts[1].mediaType``), anything else about the input
    the last message's parts."""
    origin = [j for j, part in enumerate(parts)
              if isinstance(part, dict) and part.get("type") in AI_SDK_CONTENT_PARTS]

    def rename(name: str) -> str:
        found = _CONTENT_FIELD.match(name)
        if found and int(found[1]) < len(origin):
            suffix = _AI_SDK_FIELDS.get(found[2], "")
            return f"messages[{last}].parts[{origin[int(found[1])]}]{suffix}"
        return f"messages[{last}].parts" if name.startswith("input") else name

    return rename


def ag_ui_names(name: str, last: int) -> str | None:
    """The AG-UI input's name of a pipeline field about one block of the posted message
    (``messages[2].content[1].source.mimeType``), or None for any other field."""
    found = _CONTENT_FIELD.match(name)
    if not found:
        return None
    return f"messages[{last}].content[{found[1]}]{_AG_UI_FIELDS.get(found[2], '')}"
