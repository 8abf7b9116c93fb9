"""Best-effort parsing of a JSON prefix, for tool-call arguments as they stream in."""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json


def parse_partial_object(text: str) -> dict[str, Any]:
    """The best object known from a prefix of JSON text; ``{}`` when nothing usable yet.

    ``{"path": "/tm`` gives ``{"path": "/tm"}``. Never raises: a prefix that is not JSON at all,
    or JSON that is not an object, gives ``{}``.
    """
    if not text:
        return {}
    try:
        value = from_json(text, allow_partial="trailing-strings")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def parse_complete_object(text: str) -> tuple[dict[str, Any], str | None]:
    """Parse finished arguments text: ``(arguments, None)`` or ``({...best effort}, error)``.

    Empty text is ``{}`` (some providers send no arguments for a function without parameters).
    """
    if not text.strip():
        return {}, None
    try:
        value = from_json(text)
    except ValueError as exc:
        return parse_partial_object(text), f"arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None
