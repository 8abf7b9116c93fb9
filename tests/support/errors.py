"""A refused request's error in either shape the API answers with: the JSON body most doors
send, or the plain text of a door whose toolkit shows the body verbatim (``/ai-sdk/``)."""

from __future__ import annotations

from typing import Any

import httpx


def api_error(resp: httpx.Response) -> dict[str, Any]:
    """``{"code", "message", "field"}`` of a 4xx/5xx response."""
    if resp.headers.get("content-type", "").startswith("text/plain"):
        return {"code": resp.headers["x-agentloop-error-code"], "message": resp.text,
                "field": resp.headers.get("x-agentloop-error-field")}
    error: dict[str, Any] = resp.json()["error"]
    return error
