"""Request body guard (pure ASGI): JSON only, and never more than ``max_body_bytes``.

A declared ``Content-Length`` over the limit is refused before a byte is read; a chunked body is
counted as it arrives and refused the moment it passes the limit (the app reading it sees a 413
``HTTPException``), so an unbounded body is never buffered.
"""

from __future__ import annotations

import orjson
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body, text_headers

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodyTooLarge(HTTPException):
    """The body passed the configured limit while being read."""


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


async def _reject(send: Send, status: int, code: str, message: str, text: bool) -> None:
    """The error in the API.md shape, or in plain text (``app.api.errors``)."""
    extra: list[tuple[bytes, bytes]] = []
    if text:
        body, kind = message.encode(), b"text/plain; charset=utf-8"
        extra = [(k.encode(), v.encode()) for k, v in text_headers(code, None).items()]
    else:
        body, kind = orjson.dumps(error_body(code, message)), b"application/json"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})


class BodyGuard:
    """415 for a non-JSON body, 413 past ``limit`` bytes (declared or streamed); in plain
    text under ``text_paths``."""

    def __init__(self, app: ASGIApp, limit: int, text_paths: tuple[str, ...] = ()) -> None:
        self.app = app
        self.limit = limit
        self.text_paths = text_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        length = headers.get("content-length")
        has_body = "transfer-encoding" in headers or (length is not None and length != "0")
        if has_body and not _is_json(headers.get("content-type", "")):
            await _reject(send, 415, "unsupported_media_type",
                          "request bodies must be application/json", self._text(scope))
            return
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _reject(send, 413, "body_too_large",
                          f"request body exceeds {self.limit} bytes", self._text(scope))
            return
        await self.app(scope, self._counting(receive), send)

    def _text(self, scope: Scope) -> bool:
        return bool(self.text_paths) and str(scope.get("path", "")).startswith(self.text_paths)

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(413, f"request body exceeds {self.limit} bytes")
            return message

        return counted
