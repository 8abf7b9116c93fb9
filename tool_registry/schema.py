"""Signature → JSON Schema, docstring → descriptions, and argument validation.

``@function`` tools validate with a pydantic model built from the signature (lax mode: ``"30"``
is accepted for an ``int``, including ``int | None``). Tools given as plain JSON Schema validate
with ``validate_json_schema``, a small checker with the same coercions.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, get_args, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.fields import FieldInfo

from tool_registry.types import ArgumentError, CancelSignal, Progress, ToolContext

INJECTED_TYPES: tuple[object, ...] = (ToolContext, Progress, CancelSignal)
"""Parameter annotations the loop fills in; they never appear in a schema."""

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?|Attributes):\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {param: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    i = 0
    while i < len(lines) and not _ARGS_HEADER.match(lines[i]):
        if _SECTION.match(lines[i]):
            break
        desc.append(lines[i])
        i += 1
    if i < len(lines) and _ARGS_HEADER.match(lines[i]):
        i += 1
        indent: int | None = None
        current: str | None = None
        while i < len(lines) and not _SECTION.match(lines[i]):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            width = len(line) - len(line.lstrip())
            match = _ARG_LINE.match(line)
            if match and (indent is None or width <= indent):
                indent = width
                current = match.group(1).lstrip("*")
                params[current] = match.group(3).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(desc).strip(), params


def injected_kind(hint: object) -> object | None:
    """The injected type a parameter annotation asks for (``X`` or ``X | None``), if any."""
    if hint in INJECTED_TYPES:
        return hint
    args: list[object] = [a for a in get_args(hint) if a is not type(None)]
    if len(args) == 1 and args[0] in INJECTED_TYPES:
        return args[0]
    return None


def injected_params(func: Callable[..., Any]) -> dict[str, object]:
    """Parameters of ``func`` the loop injects: name → the injected type."""
    hints = get_type_hints(func)
    found = {name: injected_kind(hint) for name, hint in hints.items() if name != "return"}
    return {name: kind for name, kind in found.items() if kind is not None}


def build_model(func: Callable[..., Any], name: str,
                param_docs: dict[str, str]) -> type[BaseModel]:
    """The pydantic model of ``func``'s model-visible parameters."""
    hints = get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(param.name, Any)
        if injected_kind(hint) is not None:
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hint, FieldInfo(default=default,
                                              description=param_docs.get(param.name)))
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)
    return create_model(f"{name}_args", __config__=config, **fields)


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A JSON Schema providers accept: an object, no titles, ``$defs`` kept."""
    schema = model.model_json_schema()
    _strip_titles(schema)
    schema.setdefault("properties", {})
    schema["type"] = "object"
    return schema


def _strip_titles(node: Any) -> None:
    if isinstance(node, dict):
        title = node.get("title")
        if isinstance(title, str):
            del node["title"]
        for key, value in node.items():
            if key != "properties":
                _strip_titles(value)
            else:
                for prop in value.values():
                    _strip_titles(prop)
    elif isinstance(node, list):
        for item in node:
            _strip_titles(item)


def validate_with_model(model: type[BaseModel], args: dict[str, Any]) -> dict[str, Any]:
    """Validated (and coerced) arguments, or ``ArgumentError`` naming each bad field."""
    try:
        parsed = model.model_validate(args)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
            problems.append(f"- {where}: {err['msg']}")
        raise ArgumentError(_argument_error(problems, args)) from None
    return {name: getattr(parsed, name) for name in type(parsed).model_fields}


def _argument_error(problems: list[str], args: dict[str, Any]) -> str:
    import json

    received = json.dumps(args, ensure_ascii=False, default=str)
    if len(received) > 2000:
        received = received[:2000] + "…"
    return "Invalid arguments:\n" + "\n".join(problems) + f"\nReceived arguments: {received}"


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,), "null": (type(None),),
}


def validate_json_schema(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Check ``args`` against a plain JSON Schema (types, required, enum, nested), coercing
    numeric and boolean strings; returns the coerced arguments or raises ``ArgumentError``."""
    problems: list[str] = []
    value = _check(schema, args, "", problems)
    if problems:
        raise ArgumentError(_argument_error(problems, args))
    return value if isinstance(value, dict) else args


def _check(schema: dict[str, Any], value: Any, path: str, problems: list[str]) -> Any:
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        value, ok = _coerce(value, allowed)
        if not ok:
            problems.append(f"- {path or '(arguments)'}: expected {' or '.join(allowed)}, "
                            f"got {type(value).__name__}")
            return value
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"- {path or '(arguments)'}: must be one of {schema['enum']}")
    if isinstance(value, dict):
        props: dict[str, Any] = schema.get("properties", {})
        for req in schema.get("required", []):
            if req not in value:
                problems.append(f"- {path + '.' if path else ''}{req}: field required")
        out = dict(value)
        for key, sub in props.items():
            if key in value and isinstance(sub, dict):
                out[key] = _check(sub, value[key], f"{path}.{key}" if path else key, problems)
        if schema.get("additionalProperties") is False:
            for key in value:
                if key not in props:
                    problems.append(f"- {path + '.' if path else ''}{key}: unexpected field")
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_check(schema["items"], v, f"{path}.{i}", problems) for i, v in enumerate(value)]
    return value


def _coerce(value: Any, allowed: list[str]) -> tuple[Any, bool]:
    for name in allowed:
        kinds = _JSON_TYPES.get(name, (object,))
        if isinstance(value, kinds) and not (name in ("integer", "number")
                                             and isinstance(value, bool)):
            return value, True
    if isinstance(value, str):
        text = value.strip()
        for name in allowed:
            try:
                if name == "integer":
                    return int(text), True
                if name == "number":
                    return float(text), True
            except ValueError:
                continue
            if name == "boolean" and text.lower() in ("true", "false"):
                return text.lower() == "true", True
    if "integer" in allowed and isinstance(value, float) and value.is_integer():
        return int(value), True
    return value, False
