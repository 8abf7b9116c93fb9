"""A refused request's error in either shape the API answers with: the JSON body most doors
send, or the plain text of a door whose toolkit shows the body verbatim (``/ai-sdk/``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import httpx


def api_error(resp: httpx.Response) -> dict[str, Any]:
    """``{"code", "message", "field"}`` of a 4xx/5xx response."""
    if resp.headers.get("content-type", "").startswith("text/plain"):
        field = resp.headers.get("x-agentloop-error-field")
        return {"code": resp.headers["x-agentloop-error-code"], "message": resp.text,
                "field": None if field is None else unquote(field)}
    error: dict[str, Any] = resp.json()["error"]
    return error
