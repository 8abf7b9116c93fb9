"""Which JSON Schemas agentloop validates values against, and which are ``strict``.

A response format's schema (``response_format.json_schema.schema``) is checked here before a run
starts, so that every keyword in it is one ``tool_registry.json_validate`` enforces: a schema
using a keyword this checker does not know is refused rather than half-enforced. Supported
(JSON Schema 2020-12 names)::

    any type     type, enum, const, anyOf, oneOf, allOf, not, $ref (local: "#", "#/..."),
                 $defs / definitions
    object       properties, required, additionalProperties, minProperties, maxProperties
    array        items, prefixItems, minItems, maxItems, uniqueItems
    string       minLength, maxLength, pattern (RE2 syntax, unanchored)
    number       minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf
    annotations  title, description, default, examples, format (not asserted), deprecated,
                 readOnly, writeOnly, $schema, $id, $comment, contentEncoding,
                 contentMediaType, discriminator, x-*

``strict_problem`` says whether a schema fits the subset the providers' constrained decoding
takes (OpenAI's strict mode rules): every object lists all its ``properties`` in ``required``
and sets ``additionalProperties: false``; keywords limited to ``STRICT_KEYWORDS``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import re2

TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "format", "deprecated",
                         "readOnly", "writeOnly", "$schema", "$id", "$comment",
                         "contentEncoding", "contentMediaType", "discriminator"})
ONE_SCHEMA = ("additionalProperties", "items", "not")
SCHEMA_MAPS = ("properties", "$defs", "definitions")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
COUNTS = ("minProperties", "maxProperties", "minItems", "maxItems", "minLength", "maxLength")
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
KEYWORDS = frozenset({"type", "enum", "const", "$ref", "required", "uniqueItems", "pattern",
                      "multipleOf", *ONE_SCHEMA, *SCHEMA_MAPS, *SCHEMA_LISTS, *COUNTS,
                      *BOUNDS})
STRICT_KEYWORDS = frozenset({"type", "properties", "required", "additionalProperties", "items",
                             "enum", "const", "anyOf", "$ref", "$defs", "definitions",
                             "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
                             "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
                             "title", "description", "$schema", "$comment"})
MAX_DEPTH = 48
"""Deepest nesting of subschemas accepted."""


class SchemaProblem(ValueError):
    """A schema agentloop cannot take: ``pointer`` (JSON Pointer into it) and the problem."""

    def __init__(self, pointer: str, problem: str) -> None:
        super().__init__(f"at {pointer or '/'}: {problem}")
        self.pointer = pointer
        self.problem = problem


def check_schema(schema: Any) -> None:
    """``SchemaProblem`` unless ``schema`` is an object schema (``type: "object"`` at the top)
    whose every keyword is supported (see the module docstring) and well formed."""
    if not isinstance(schema, dict):
        raise SchemaProblem("", "must be a JSON Schema object")
    if schema.get("type") not in ("object", ["object"]):
        raise SchemaProblem("/type", 'the top level must be an object schema (type "object")')
    for pointer, node in walk(schema):
        _check_node(schema, node, pointer)


def strict_problem(schema: dict[str, Any]) -> SchemaProblem | None:
    """Why a checked schema is not strict-compatible, or None when it is."""
    for pointer, node in walk(schema):
        if node is False and pointer.endswith("/additionalProperties"):
            continue
        if not isinstance(node, dict):
            return SchemaProblem(pointer, "strict mode takes no boolean schemas")
        extra = sorted(k for k in node if k not in STRICT_KEYWORDS)
        if extra:
            return SchemaProblem(pointer, f"strict mode does not support {extra[0]!r}")
        if _is_object(node):
            problem = _strict_object(node)
            if problem:
                return SchemaProblem(pointer, problem)
    return None


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or (
        "properties" in node)


def _strict_object(node: dict[str, Any]) -> str | None:
    if node.get("additionalProperties") is not False:
        return "strict mode needs additionalProperties: false on every object"
    missing = sorted(set(node.get("properties", {})) - set(node.get("required", [])))
    if missing:
        return f"strict mode needs every property required (missing {missing[0]!r})"
    return None


def walk(schema: Any, pointer: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every subschema (``schema`` first) with its JSON Pointer; containers of the wrong
    shape are skipped (``check_schema`` reports them)."""
    if depth > MAX_DEPTH:
        raise SchemaProblem(pointer, f"nested more than {MAX_DEPTH} levels deep")
    yield pointer, schema
    if not isinstance(schema, dict):
        return
    for key in ONE_SCHEMA:
        if isinstance(schema.get(key), dict | bool):
            yield from walk(schema[key], f"{pointer}/{key}", depth + 1)
    for key in SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield from walk(sub, f"{pointer}/{key}/{escape(name)}", depth + 1)
    for key in SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                yield from walk(sub, f"{pointer}/{key}/{i}", depth + 1)


def escape(name: str) -> str:
    """A JSON Pointer token (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")


def resolve(root: dict[str, Any], ref: str) -> Any:
    """The subschema a local ``$ref`` points at; ``KeyError`` when it points nowhere."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise KeyError(ref)
    node: Any = root
    for token in ref[2:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise KeyError(ref)
    return node


def _check_node(root: dict[str, Any], node: Any, pointer: str) -> None:
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise SchemaProblem(pointer, "must be a schema (an object or a boolean)")
    for key, value in node.items():
        problem = _keyword_problem(key, value)
        if problem:
            raise SchemaProblem(f"{pointer}/{escape(key)}", problem)
    if "$ref" in node:
        _check_ref(root, node["$ref"], f"{pointer}/$ref")


def _keyword_problem(key: str, value: Any) -> str | None:
    if key in ANNOTATIONS or key.startswith("x-"):
        return None
    if key not in KEYWORDS:
        return "agentloop does not validate this keyword (see the supported ones in the docs)"
    if key == "type":
        return _type_problem(value)
    if key in ONE_SCHEMA:
        return None if isinstance(value, dict | bool) else "must be a schema"
    if key in SCHEMA_MAPS:
        return None if isinstance(value, dict) else "must be an object of schemas"
    if key in SCHEMA_LISTS:
        return None if isinstance(value, list) and value else "must be a non-empty list"
    return _value_problem(key, value)


def _type_problem(value: Any) -> str | None:
    kinds = value if isinstance(value, list) else [value]
    if kinds and all(isinstance(k, str) and k in TYPES for k in kinds):
        return None if len(set(kinds)) == len(kinds) else "lists a type twice"
    return f"must be one of {sorted(TYPES)} (or a list of them)"


def _value_problem(key: str, value: Any) -> str | None:
    if key == "enum":
        return None if isinstance(value, list) and value else "must be a non-empty list"
    if key == "required":
        ok = isinstance(value, list) and all(isinstance(r, str) for r in value)
        return None if ok else "must be a list of property names"
    if key in COUNTS:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "must be a non-negative integer"
    if key in BOUNDS:
        return None if _is_number(value) else "must be a number"
    if key == "multipleOf":
        return None if _is_number(value) and value > 0 else "must be a number above 0"
    if key == "uniqueItems":
        return None if isinstance(value, bool) else "must be true or false"
    if key == "pattern":
        return _pattern_problem(value)
    if key == "$ref":
        return None if isinstance(value, str) else "must be a string"
    return None  # const: any value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _pattern_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    try:
        compile_pattern(value)
    except ValueError as exc:
        return str(exc)
    return None


def compile_pattern(pattern: str) -> Any:
    """``pattern`` as an RE2 regex (linear time on any text; ``ValueError`` when RE2 cannot
    take it: no backreferences, no lookaround)."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"not a regular expression RE2 takes: {detail}") from None


def _check_ref(root: dict[str, Any], ref: str, pointer: str) -> None:
    """A local reference that resolves, and no chain of bare references that loops."""
    seen: set[str] = set()
    while True:
        if ref in seen:
            raise SchemaProblem(pointer, f"{ref!r} refers to itself")
        seen.add(ref)
        try:
            target = resolve(root, ref)
        except KeyError:
            raise SchemaProblem(pointer, f"{ref!r} is no local reference into this schema "
                                "('#' or '#/...')") from None
        if not (isinstance(target, dict) and isinstance(target.get("$ref"), str)):
            return
        ref = target["$ref"]
