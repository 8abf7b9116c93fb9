"""Request bodies parsed by orjson, the serializer every stored request and event goes through,
and never nested deeper than ``MAX_DEPTH``.

The standard library's ``json.loads`` (FastAPI's parser) accepts what orjson later refuses to
write: ``NaN``/``Infinity``, lone surrogate escapes (``"\\ud800"``) and integers wider than 64
bits, so such a body passed validation and failed as a 500 when the run was hashed or stored;
and it recurses without a depth limit. orjson refuses all of these while parsing (integers
wider than 64 bits read as floats), and its ``JSONDecodeError`` subclasses the standard one, so
FastAPI reports the body as 400 ``invalid_json`` like any malformed JSON. orjson reads 1024
levels but writes only 254, so a body it read could still fail to be stored (or to be
reported in a validation error): every body deeper than ``MAX_DEPTH`` is a 422 naming where.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.api.errors import ApiError

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects a request body may have."""


def strict_loads(raw: bytes) -> Any:
    """``raw`` as JSON; ``orjson.JSONDecodeError`` (a ``json.JSONDecodeError``) if it is not
    JSON orjson can write back; ``ApiError`` 422 naming where it nests too deep. Every door's
    body goes through this (the FastAPI routes through ``StrictJsonRequest``, ``/mcp``
    before the SDK parses it again)."""
    value = orjson.loads(raw)
    too_deep = deepest_path(value, MAX_DEPTH)
    if too_deep is not None:
        raise ApiError(422, "validation_error", f"{too_deep}: nested deeper than "
                       f"{MAX_DEPTH} levels", too_deep)
    return value


class StrictJsonRequest(Request):
    """A request whose ``json()`` is ``strict_loads``."""

    async def json(self) -> Any:
        """The body as ``strict_loads`` reads it."""
        if not hasattr(self, "_json"):
            self._json = strict_loads(await self.body())
        return self._json


def deepest_path(value: Any, limit: int) -> str | None:
    """None when ``value`` nests at most ``limit`` levels, else the path to where it goes
    deeper (its first four steps: enough to name the field, e.g. ``tools[0].parameters.x``)."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if depth > limit:
            return _path(path[:4])
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((child, depth + 1, (*path, key)) for key, child in items
                     if isinstance(child, dict | list))
    return None


def _path(parts: tuple[str | int, ...]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


class StrictJsonRoute(APIRoute):
    """An ``APIRoute`` whose endpoint sees a ``StrictJsonRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict
