"""Request bodies parsed by orjson, the serializer every stored request and event goes through.

The standard library's ``json.loads`` (FastAPI's parser) accepts what orjson later refuses to
write: ``NaN``/``Infinity``, lone surrogate escapes (``"\\ud800"``) and integers wider than 64
bits, so such a body passed validation and failed as a 500 when the run was hashed or stored;
and it recurses without a depth limit. orjson refuses all of these while parsing (depth limit
1024, integers wider than 64 bits read as floats), and its ``JSONDecodeError`` subclasses the
standard one, so FastAPI reports the body as 400 ``invalid_json`` like any malformed JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute


class StrictJsonRequest(Request):
    """A request whose ``json()`` is ``orjson.loads``."""

    async def json(self) -> Any:
        """The body as JSON; ``orjson.JSONDecodeError`` (a ``json.JSONDecodeError``) if it is
        not JSON orjson can write back."""
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """An ``APIRoute`` whose endpoint sees a ``StrictJsonRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict
