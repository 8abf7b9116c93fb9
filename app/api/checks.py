"""The checks of the run pipeline (``app.api.pipeline``): what a request's options and input
refer to, each failure an ``ApiError`` naming the field (in the pipeline's own names; a door
renames them into its wire format).

Shapes were refused by the options model already (422). Here: the model (400
``invalid_model``), the tool names and toolset (400 ``unknown_tool`` / ``unknown_toolset``), a
forced ``tool_choice`` that is not on the menu (400 ``invalid_tool_choice``), ``approval``
names (400 ``unknown_tool``), ``client_tools`` (400 ``invalid_client_tool`` for a name already
on the menu or given twice, 422 for a schema no provider takes), a ``timeout`` beyond the
server's (422), a ``response_format`` schema agentloop cannot validate answers to, or a
``strict`` one that is not strict-compatible (422 naming ``response_format.json_schema.schema``),
and each message of the input (422, ``input[i].<field>``), its attachments by
``app.api.attachment_checks`` (422 shape, 400 a kind the model cannot take, 413 size).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
from pydantic import ValidationError

from app.api.attachment_checks import AttachmentRules, Budget, check_attachment
from app.api.errors import ApiError, deepest_error, field_path
from app.api.options import ForcedChoice, RunOptions
from app.engine.approvals import add_client_tools
from app.engine.loop_config import ResolveProvider
from app.engine.output import check_format
from providers.catalog import ModelSpecError
from providers.messages import (
    DocumentContent,
    ImageContent,
    TextContent,
    UserMessage,
    dump_message,
    message_adapter,
)
from providers.safe_fetch import literal_reason
from tool_registry import Menu, MenuError, Registry, build_menu
from tool_registry.json_schema import SchemaProblem

SCHEMA_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})


MESSAGE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""What a client's id of a user message may be (``UserMessage.id``)."""


def invalid(field: str, problem: str) -> ApiError:
    """422 ``validation_error`` naming ``field``."""
    return ApiError(422, "validation_error", f"{field}: {problem}", field)


def check_webhook(url: str | None, *, secret: str | None, allowed: Iterable[str]) -> None:
    """422 naming ``webhook`` unless it is an http(s) URL a delivery may go to: webhooks on
    (a signing secret set), and no literal address the SSRF guard refuses unless allowed
    (names are resolved and checked at each delivery)."""
    if url is None:
        return
    if secret is None:
        raise invalid("webhook", "webhooks are off (AGENTLOOP_WEBHOOK_SECRET is not set)")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise invalid("webhook", "an http or https URL")
    if any(url.startswith(prefix) for prefix in allowed):
        return
    reason = literal_reason(parsed.host, False)
    if reason:
        raise invalid("webhook", f"{parsed.host} is {reason}")


def check_model(model: str, resolve: ResolveProvider) -> None:
    """400 ``invalid_model`` unless ``model`` can be served."""
    try:
        resolve(model)
    except ModelSpecError as exc:
        raise ApiError(400, "invalid_model", exc.message, exc.field) from exc
    except ValueError as exc:
        raise ApiError(400, "invalid_model", str(exc), "model") from exc


def run_menu(options: RunOptions, *, registry: Registry, disabled: Iterable[str],
             env: Mapping[str, str]) -> Menu:
    """The run's menu as the runner will build it, its client tools on it: 400 for an unknown
    tool or toolset, a forced tool that is not on it, or a client tool whose name is taken."""
    try:
        menu = build_menu(tools=options.tools, toolset=options.toolset,
                          tools_source=options.tools_source, tools_allow=options.tools_allow,
                          tools_deny=options.tools_deny, disabled=disabled, registry=registry,
                          env=env)
    except MenuError as exc:
        code = "unknown_toolset" if exc.field == "toolset" else "unknown_tool"
        raise ApiError(400, code, str(exc), exc.field) from exc
    _check_client_tools(options, menu)
    choice = options.tool_choice
    if isinstance(choice, ForcedChoice) and choice.name not in menu.tools:
        raise ApiError(400, "invalid_tool_choice",
                       f"tool_choice names {choice.name!r}, which is not on this run's menu",
                       "tool_choice")
    return menu


def _check_client_tools(options: RunOptions, menu: Menu) -> None:
    specs = []
    for i, tool in enumerate(options.client_tools or []):
        field = f"client_tools[{i}]"
        if tool.name in menu.tools:
            raise ApiError(400, "invalid_client_tool", f"client tool {tool.name!r}: the name "
                           "is already on this run's menu", f"{field}.name")
        check_schema(tool.parameters, f"{field}.parameters", top=True)
        specs.append(tool.model_dump())
        add_client_tools(menu, specs[-1:])


def check_schema(schema: Any, field: str, *, top: bool = False) -> None:
    """422 for a tool's argument schema the providers (and our argument checker) cannot take:
    not an object, a ``type`` that is no JSON type, ``properties`` that are not schemas,
    ``required`` that is not a list of names; the top level must be an object schema."""
    if not isinstance(schema, dict):
        raise invalid(field, "must be a JSON Schema object")
    kind = schema.get("type", "object" if top else None)
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if not all(isinstance(k, str) and k in SCHEMA_TYPES for k in kinds):
        raise invalid(f"{field}.type", "must be a JSON Schema type (or a list of them)")
    if top and kinds != ["object"]:
        raise invalid(field, "must be an object schema (type 'object')")
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        raise invalid(f"{field}.properties", "must be an object of schemas")
    for name, sub in props.items():
        check_schema(sub, f"{field}.properties.{name}")
    required = schema.get("required", [])
    if not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
        raise invalid(f"{field}.required", "must be a list of property names")
    if "items" in schema and not isinstance(schema["items"], dict | bool):
        raise invalid(f"{field}.items", "must be a schema")
    if isinstance(schema.get("items"), dict):
        check_schema(schema["items"], f"{field}.items")
    if "enum" in schema and not isinstance(schema["enum"], list):
        raise invalid(f"{field}.enum", "must be a list")


def check_approval(options: RunOptions, registry: Registry) -> None:
    """400 ``unknown_tool`` for an ``approval`` entry that names no tool or toolset."""
    if not isinstance(options.approval, list):
        return
    for i, name in enumerate(options.approval):
        if name not in registry.tools and not registry.has_toolset(name):
            raise ApiError(400, "unknown_tool", f"approval names {name!r}, which is no tool "
                           "or toolset", f"approval[{i}]")


def check_response_format(options: RunOptions) -> None:
    """422 naming ``response_format.json_schema.schema`` for a schema whose answers agentloop
    cannot validate (``tool_registry.json_schema``), or a ``strict`` one that is not
    strict-compatible; the message says where in the schema (a JSON Pointer)."""
    fmt = options.response_format.domain() if options.response_format is not None else None
    if fmt is None:
        return
    try:
        check_format(fmt)
    except SchemaProblem as exc:
        raise invalid("response_format.json_schema.schema", str(exc)) from exc


def check_timeout(options: RunOptions, server_timeout: float) -> None:
    """422 for a ``timeout`` longer than the server allows (``AGENTLOOP_RUN_TIMEOUT``)."""
    if options.timeout is not None and server_timeout and options.timeout > server_timeout:
        raise invalid("timeout", f"at most {server_timeout:g} seconds on this server "
                      "(AGENTLOOP_RUN_TIMEOUT)")


def _join(prefix: str, sub: str | None) -> str | None:
    if not sub:
        return prefix or None
    return prefix + sub if not prefix or sub.startswith("[") else f"{prefix}.{sub}"


def validation_to_api(exc: ValidationError, prefix: str) -> ApiError:
    """A pydantic error under ``prefix`` as a 422 naming its field."""
    err = deepest_error(exc.errors())
    field = _join(prefix, field_path(err.get("loc", ())))
    message = f"{field}: {err.get('msg', 'invalid')}" if field else str(err.get("msg"))
    return ApiError(422, "validation_error", message, field)


def check_user_content(message: UserMessage, field: str, rules: AttachmentRules,
                       budget: Budget) -> None:
    """422 for user content no provider accepts: blank text, an empty block list; each image
    and document checked against ``rules`` (``app.api.attachment_checks``), so it is refused
    here, naming the field (and the model), not as a provider error that fails the run
    later."""
    content = message.content
    if isinstance(content, str) or not content:
        if not (isinstance(content, str) and content.strip()):
            raise invalid(field, "must not be empty")
        return
    for i, block in enumerate(content):
        if isinstance(block, ImageContent | DocumentContent):
            check_attachment(block, f"{field}[{i}]", rules, budget)
        elif isinstance(block, TextContent) and not block.text.strip():
            raise invalid(f"{field}[{i}].text", "must not be empty")


def normalise_input(value: str | list[dict[str, Any]],
                    rules: AttachmentRules) -> str | list[dict[str, Any]]:
    """A string as is; a list parsed message by message (errors name ``input[i]...``)."""
    budget = Budget()
    if isinstance(value, str):
        check_user_content(UserMessage(content=value, timestamp=0), "input", rules, budget)
        return value
    if not value:
        raise invalid("input", "must not be an empty list")
    out = []
    for i, raw in enumerate(value):
        try:
            message = message_adapter.validate_python(raw)
        except ValidationError as exc:
            raise validation_to_api(exc, f"input[{i}]") from exc
        if isinstance(message, UserMessage):
            check_user_content(message, f"input[{i}].content", rules, budget)
            if message.id is not None and not MESSAGE_ID.fullmatch(message.id):
                raise invalid(f"input[{i}].id", "must be 1 to 128 letters, digits or _.:-")
        out.append(dump_message(message))
    return out


def user_prompts(value: str | list[dict[str, Any]],
                 rules: AttachmentRules) -> list[UserMessage]:
    """The user messages a thread post carries (422 naming ``input[i].role`` for another
    role: the thread holds the rest of the conversation)."""
    normalised = normalise_input(value, rules)
    if isinstance(normalised, str):
        return [UserMessage(content=normalised)]
    out = []
    for i, raw in enumerate(normalised):
        message = message_adapter.validate_python(raw)
        if not isinstance(message, UserMessage):
            raise invalid(f"input[{i}].role", "a thread takes user messages only (the thread "
                          "holds the conversation)")
        out.append(message)
    return out


def user_message(content: str | list[dict[str, Any]], rules: AttachmentRules) -> UserMessage:
    """A queued user message from a steer/follow-up ``content`` (errors name ``content...``;
    its attachments are checked against the run's model)."""
    try:
        message = message_adapter.validate_python({"role": "user", "content": content})
    except ValidationError as exc:
        raise validation_to_api(exc, "") from exc
    assert isinstance(message, UserMessage)
    check_user_content(message, "content", rules, Budget())
    return message


def input_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored run's input as a list of message dicts."""
    value = request.get("input")
    if isinstance(value, str):
        return [dump_message(UserMessage(content=value, timestamp=0))]
    return list(value or [])
