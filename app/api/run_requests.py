"""From a ``POST /runs`` body to the stored, JSON-ready run request (``RunRecord.request``).

Shape errors were already refused by ``app.api.schemas`` (422). Here the references are checked,
each failure an ``ApiError`` naming the field: the model (400 ``invalid_model``), the tool names
and toolset (400 ``unknown_tool`` / ``unknown_toolset``), a forced ``tool_choice`` naming a tool
not on the menu (400 ``invalid_tool_choice``), and each message of a list ``input`` (422,
``input[i].<field>``), a ``timeout`` beyond the server's ``AGENTLOOP_RUN_TIMEOUT`` (422). The
stored request is the body with ``model`` filled in and ``input``
normalised; the runner builds the loop from it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from app.api.errors import ApiError, deepest_error, field_path
from app.api.schemas import CreateRun, ForcedChoice
from providers.base import Provider
from providers.catalog import ModelSpecError
from providers.messages import ImageContent, TextContent, UserMessage, dump_message, message_adapter
from tool_registry import MenuError, Registry, build_menu

ResolveProvider = Callable[[str], tuple[Provider, str]]
"""``"provider:model"`` → (provider, model id); raises ``ModelSpecError`` (or ``ValueError``)."""


def check_model(model: str, resolve: ResolveProvider) -> None:
    """400 ``invalid_model`` unless ``model`` can be served."""
    try:
        resolve(model)
    except ModelSpecError as exc:
        raise ApiError(400, "invalid_model", exc.message, exc.field) from exc
    except ValueError as exc:
        raise ApiError(400, "invalid_model", str(exc), "model") from exc


def _join(prefix: str, sub: str | None) -> str | None:
    if not sub:
        return prefix or None
    return prefix + sub if not prefix or sub.startswith("[") else f"{prefix}.{sub}"


def _validation_to_api(exc: ValidationError, prefix: str) -> ApiError:
    err = deepest_error(exc.errors())
    sub = field_path(err.get("loc", ()))
    field = _join(prefix, sub)
    message = f"{field}: {err.get('msg', 'invalid')}" if field else str(err.get("msg"))
    return ApiError(422, "validation_error", message, field)


def _invalid(field: str, problem: str) -> ApiError:
    return ApiError(422, "validation_error", f"{field}: {problem}", field)


def check_user_content(message: UserMessage, field: str) -> None:
    """422 for user content no provider accepts: blank text, an empty block list, an image
    whose ``data`` is not base64 or whose ``mime_type`` is not ``image/*`` (refused here, not
    as a provider error that fails the run later)."""
    content = message.content
    if isinstance(content, str) or not content:
        if not (isinstance(content, str) and content.strip()):
            raise _invalid(field, "must not be empty")
        return
    for i, block in enumerate(content):
        if isinstance(block, ImageContent):
            _check_image(block, f"{field}[{i}]")
        elif isinstance(block, TextContent) and not block.text.strip():
            raise _invalid(f"{field}[{i}].text", "must not be empty")


def _check_image(image: ImageContent, field: str) -> None:
    if not image.mime_type.startswith("image/"):
        raise _invalid(f"{field}.mime_type", "must be an image/* media type")
    try:
        ok = bool(image.data) and bool(base64.b64decode(image.data, validate=True))
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise _invalid(f"{field}.data", "must be non-empty base64")


def normalise_input(value: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A string as is; a list parsed message by message (errors name ``input[i]...``)."""
    if isinstance(value, str):
        check_user_content(UserMessage(content=value, timestamp=0), "input")
        return value
    if not value:
        raise ApiError(422, "validation_error", "input: must not be an empty list", "input")
    out = []
    for i, raw in enumerate(value):
        try:
            message = message_adapter.validate_python(raw)
        except ValidationError as exc:
            raise _validation_to_api(exc, f"input[{i}]") from exc
        if isinstance(message, UserMessage):
            check_user_content(message, f"input[{i}].content")
        out.append(dump_message(message))
    return out


def user_message(content: str | list[dict[str, Any]]) -> UserMessage:
    """A queued user message from a steer/follow-up ``content`` (errors name ``content...``)."""
    try:
        message = message_adapter.validate_python({"role": "user", "content": content})
    except ValidationError as exc:
        raise _validation_to_api(exc, "") from exc
    assert isinstance(message, UserMessage)
    check_user_content(message, "content")
    return message


def check_tools(body: CreateRun, *, registry: Registry, disabled: Iterable[str],
                env: Mapping[str, str]) -> None:
    """400 for an unknown tool/toolset or a forced tool that is not on the menu."""
    try:
        menu = build_menu(tools=body.tools, toolset=body.toolset, tools_source=body.tools_source,
                          tools_allow=body.tools_allow, tools_deny=body.tools_deny,
                          disabled=disabled, registry=registry, env=env)
    except MenuError as exc:
        code = "unknown_toolset" if exc.field == "toolset" else "unknown_tool"
        raise ApiError(400, code, str(exc), exc.field) from exc
    choice = body.tool_choice
    if isinstance(choice, ForcedChoice) and choice.name not in menu.tools:
        raise ApiError(400, "invalid_tool_choice",
                       f"tool_choice names {choice.name!r}, which is not on this run's menu",
                       "tool_choice")


def check_timeout(body: CreateRun, server_timeout: float) -> None:
    """422 for a ``timeout`` longer than the server allows (``AGENTLOOP_RUN_TIMEOUT``)."""
    if body.timeout is not None and server_timeout and body.timeout > server_timeout:
        raise _invalid("timeout", f"at most {server_timeout:g} seconds on this server "
                       "(AGENTLOOP_RUN_TIMEOUT)")


def stored_request(body: CreateRun, model: str) -> dict[str, Any]:
    """The JSON-ready request the runner reads (``model`` filled, ``input`` normalised)."""
    data = body.model_dump(mode="json")
    data["model"] = model
    data["input"] = normalise_input(body.input)
    return data


def request_hash(request: dict[str, Any]) -> str:
    """A stable digest of a request (``Idempotency-Key`` compares these)."""
    return hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS)).hexdigest()


def input_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's input as a list of message dicts."""
    value = request.get("input")
    if isinstance(value, str):
        return [dump_message(UserMessage(content=value, timestamp=0))]
    return list(value or [])
