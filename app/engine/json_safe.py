"""A tool's result as JSON can carry it: every event, message and checkpoint is UTF-8 JSON.

Python strings can hold what UTF-8 cannot: lone surrogates. They come from bytes that were not
UTF-8 decoded with ``surrogateescape`` (``os.listdir`` and every path of a file named in
another encoding, ``os.environ``, a tool's own decoding), and from JSON escapes the standard
library's ``json`` takes (an MCP server's reply). One in a tool's result made its
``tool_execution_end`` unencodable and failed the whole run ("the service failed while driving
the run"); in a thread's shared workspace the same file name failed every later run that
listed files. ``run_tool`` passes every result through ``json_safe``: each lone surrogate
becomes U+FFFD (the replacement character, as a decoder shows a byte it cannot read), in the
content the model reads and in the ``details`` the client sees; a tool body's progress and
data events go through ``safe_value``. A result with none is returned
as it is, after one UTF-8 encode per text block (C speed; results are per call, not per
delta).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from app.engine.events import json_bytes
from providers.messages import ImageContent, TextContent
from tool_registry import ToolResult

_SURROGATE = re.compile("[\ud800-\udfff]")


def safe_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (``text`` itself if it has none)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _safe_value(value: Any) -> Any:
    """``details`` rebuilt with every string (keys too) made safe; a dataclass as its fields,
    anything else that is not JSON's own as its ``str()`` (as the event encoder writes it)."""
    if isinstance(value, str):
        return safe_text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {_safe_key(k): _safe_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_safe_value(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _safe_value(dataclasses.asdict(value))
    return safe_text(str(value))


def _safe_key(key: Any) -> Any:
    if key is None or isinstance(key, bool | int | float):
        return key
    return safe_text(key if isinstance(key, str) else str(key))


def safe_value(value: Any) -> Any:
    """``value`` itself if the event encoder can write it, else its safe copy: what a tool
    body hands its progress and data events."""
    try:
        json_bytes(value)
    except TypeError:  # orjson.JSONEncodeError
        return _safe_value(value)
    return value


def json_safe(result: ToolResult) -> ToolResult:
    """``result`` with nothing UTF-8 cannot encode (see the module docstring)."""
    for block in result.content:
        if isinstance(block, TextContent):
            block.text = safe_text(block.text)
        elif isinstance(block, ImageContent):
            for name in ("data", "url", "mime_type"):
                value = getattr(block, name)
                if isinstance(value, str):
                    setattr(block, name, safe_text(value))
    if result.details is not None:  # checked as the events that carry it are encoded
        result.details = safe_value(result.details)
    return result
