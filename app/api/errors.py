"""Every failure the API reports, as one JSON shape (API.md)::

    {"error": {"code": "<machine_code>", "message": "<human sentence>", "field": "<path>|null"}}

Status codes: 400 malformed JSON, an unknown model/tool/toolset or an attachment the model cannot
take, 401 no or bad credentials, 404 unknown run or route, 405 wrong method, 409 idempotency
conflict / run ended / queue full / message taken, 413 body (or an attachment) too large, 415
not JSON, 422 a body or query field of the wrong shape (a missing ``input`` included), 503 the
backend is unreachable (with ``Retry-After``).

A door whose toolkit shows a refused request's body verbatim (the AI SDK's ``useChat`` puts it
in ``error.message``) answers under its path prefix in **plain text** instead: the message as
the body (it names the field), the code in ``x-agentloop-error-code`` and the field in
``x-agentloop-error-field``, percent-encoded where it holds anything but printable ASCII
(``install_error_handlers(text_paths=...)``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import Scope

from app.api.methods import allowed_methods
from app.api.schemas import ErrorBody
from app.store.errors import (
    BackendError,
    IdempotencyConflict,
    QueueFull,
    QueueItemTaken,
    RunEnded,
    RunNotFound,
)
from app.telemetry import metrics

log = logging.getLogger(__name__)

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 409: "conflict", 413: "body_too_large",
               415: "unsupported_media_type", 422: "validation_error", 429: "rate_limited",
               503: "backend_unavailable"}


class ApiError(HTTPException):
    """An error the API reports as is (an ``HTTPException``, so FastAPI passes one raised
    while it reads a body through unchanged)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status, message, headers)
        self.extra_headers = headers
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return self.message

    def renamed(self, rename: Callable[[str], str]) -> ApiError:
        """The same error with its field named by ``rename`` (a door's wire names); a
        message that starts with the field is changed with it."""
        if self.field is None:
            return self
        field = rename(self.field)
        message = self.message
        if message.startswith(self.field):
            message = field + message[len(self.field):]
        return ApiError(self.status, self.code, message, field, self.extra_headers)


_DOC = {400: "malformed JSON, an unknown model, tool or toolset, or an attachment the model "
             "cannot take",
        401: "missing or invalid API key", 404: "no such run (or another tenant's)",
        409: "conflict (idempotency key, ended run, full queue, message taken)",
        413: "request body (or an attachment) too large",
        415: "request body is not application/json",
        422: "a field of the wrong shape",
        429: "an end user's request rate was passed (rate_limited), a quota "
             "(quota_exceeded: field names the limit), or the streams it may hold open "
             "(too_many_streams); Retry-After says when to try again",
        403: "not allowed: a field the agent locks, an agent or admin route an end user was "
             "not granted, or a run's own MCP server at a URL the operator does not allow "
             "(mcp_server_not_allowed)",
        503: "the run store is unavailable (Retry-After)"}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for error statuses, each with the API.md error body (this also
    replaces FastAPI's default 422 schema, which is not the body this app sends); a route
    that authenticates (401) may also be an end user's 429."""
    if 401 in statuses:
        statuses = (*statuses, 429)
    return {status: {"model": ErrorBody, "description": _DOC[status]} for status in statuses}


def documented_text(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``documented`` for a door that answers errors in plain text (the module docstring)."""
    if 401 in statuses:
        statuses = (*statuses, 429)
    headers = {CODE_HEADER: {"description": "the error code", "schema": {"type": "string"}},
               FIELD_HEADER: {"description": "the field at fault, when one is "
                                             "(percent-encoded where it holds anything but "
                                             "printable ASCII)",
                              "schema": {"type": "string"}}}
    return {status: {"description": _DOC[status] + " (plain text: the message)",
                     "content": {"text/plain": {"schema": {"type": "string"}}},
                     "headers": headers} for status in statuses}


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """The API.md error object."""
    return {"error": {"code": code, "message": message, "field": field}}


def error_response(status: int, code: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None, *, text: bool = False) -> Response:
    """A JSON error response (``text``: the plain-text shape, see the module docstring)."""
    if not text:
        return JSONResponse(error_body(code, message, field), status_code=status,
                            headers=headers)
    return PlainTextResponse(text_message(message, field), status_code=status,
                             headers={**(headers or {}), **text_headers(code, field)})


CODE_HEADER, FIELD_HEADER = "x-agentloop-error-code", "x-agentloop-error-field"


def text_message(message: str, field: str | None) -> str:
    """The plain-text body: the message, naming the field if it does not already."""
    return message if not field or field in message else f"{field}: {message}"


_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")
"""What a field name keeps in ``x-agentloop-error-field`` as it is: printable ASCII but
``%``. A field is a path into the request, so it can hold any key the client sent."""


def text_headers(code: str, field: str | None) -> dict[str, str]:
    """The plain-text shape's headers: the code, and the field when there is one,
    percent-encoded (RFC 3986, UTF-8) where it holds anything but printable ASCII (a header
    carries Latin-1 at most and never a line break)."""
    return {CODE_HEADER: code, **({FIELD_HEADER: quote(field, safe=_HEADER_SAFE)}
                                  if field else {})}


def queue_full(exc: QueueFull) -> ApiError:
    """409 ``queue_full``: the run holds its most waiting messages (every door's answer),
    counted."""
    metrics.LIMIT_REFUSALS.labels(limit="max_queued_messages").inc()
    return ApiError(409, "queue_full", f"run {exc.run_id} already holds {exc.limit} messages "
                    "waiting to be taken (AGENTLOOP_MAX_QUEUED_MESSAGES): nothing was queued; "
                    "send it once the run has taken some")


def api_error_response(exc: ApiError, scope: Scope) -> Response:
    """``exc`` as the response the request's door answers with (plain text or JSON)."""
    return error_response(exc.status, exc.code, exc.message, exc.field, exc.extra_headers,
                          text=wants_text(Request(scope)))


def wants_text(request: Request) -> bool:
    """Whether the request came in by a door that answers errors in plain text."""
    prefixes: tuple[str, ...] = getattr(request.app.state, "text_error_paths", ())
    return request.url.path.startswith(prefixes) if prefixes else False


_DISCRIMINATORS = frozenset({"user", "assistant", "tool_result", "text", "image", "document",
                             "thinking", "tool_call"})


def field_path(loc: Sequence[int | str]) -> str | None:
    """``("body", "input", 2, "content")`` → ``"input[2].content"``.

    pydantic adds the union member it tried to the location: type names (``str``,
    ``list[...]``) are skipped, a discriminator value after an index is skipped, and a model
    name ends the path (the error is reported on the union field itself)."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    out = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part[:1].isupper():
            break
        elif "[" in part or part in _TYPE_NAMES or _is_discriminator(parts, i):
            continue
        else:
            out += f".{part}" if out else part
    return out or None


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _is_discriminator(parts: list[int | str], i: int) -> bool:
    before_ok = i == 0 or isinstance(parts[i - 1], int)
    return before_ok and parts[i] in _DISCRIMINATORS and i + 1 < len(parts)


def deepest_error(errors: Sequence[Any]) -> Any:
    """The most specific of pydantic's errors (union members each add one)."""
    return max(errors, key=lambda e: len(field_path(e.get("loc", ())) or ""))


def _first_error(errors: Sequence[Any]) -> tuple[str, str, str | None]:
    """(code, message, field) of the first pydantic error."""
    err = deepest_error(errors)
    if err.get("type") == "json_invalid":
        return "invalid_json", f"malformed JSON: {err.get('ctx', {}).get('error', '')}", None
    field = field_path(err.get("loc", ()))
    if err.get("type") == "missing" and field is None:
        return "validation_error", "a JSON request body is required", None
    message = str(err.get("msg", "invalid value"))
    return "validation_error", f"{field}: {message}" if field else message, field


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    code, message, field = _first_error(exc.errors())
    return error_response(400 if code == "invalid_json" else 422, code, message, field,
                          text=wants_text(request))


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.field, exc.extra_headers,
                          text=wants_text(request))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else code
    headers = dict(exc.headers or {})
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route {request.method} {request.url.path}"
    if exc.status_code == 405:
        allowed = allowed_methods(request.app.routes, request.scope)
        headers["Allow"] = ", ".join(allowed)
        message = f"{request.method} is not allowed here; allowed: {headers['Allow']}"
    return error_response(exc.status_code, code, message, None, headers,
                          text=wants_text(request))


async def _backend_error(request: Request, exc: Exception) -> Response:
    text = wants_text(request)
    if isinstance(exc, RunNotFound):
        return error_response(404, "run_not_found", "no such run", text=text)
    if isinstance(exc, IdempotencyConflict):
        return error_response(409, "idempotency_conflict", "this Idempotency-Key was used with "
                              "a different request body", None, text=text)
    if isinstance(exc, QueueItemTaken):
        return error_response(409, "message_taken", "the loop already took this message",
                              text=text)
    if isinstance(exc, RunEnded):
        return error_response(409, "run_ended", "the run has ended", text=text)
    if isinstance(exc, QueueFull):
        return api_error_response(queue_full(exc), request.scope)
    log.warning("backend error on %s %s: %s", request.method, request.url.path, exc)
    return error_response(503, "backend_unavailable", "the run store is unavailable; retry",
                          headers={"Retry-After": "1"}, text=text)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal_error", "internal server error",
                          text=wants_text(request))


def install_error_handlers(app: FastAPI, text_paths: tuple[str, ...] = ()) -> None:
    """Route every exception the app can see to the API.md error body (plain text under
    ``text_paths``, see the module docstring)."""
    app.state.text_error_paths = text_paths
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(BackendError, _backend_error)
    app.add_exception_handler(Exception, _internal_error)
