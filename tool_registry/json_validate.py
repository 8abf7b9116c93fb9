"""A value against a JSON Schema that ``tool_registry.json_schema.check_schema`` accepted.

Strict JSON semantics, no coercion (unlike tool arguments, ``tool_registry.schema``): ``"3"``
is no integer, ``true`` is no number and never equals ``1``; ``1.0`` is an integer. ``format``
is an annotation (not asserted), as JSON Schema 2020-12 has it by default. Each problem names
where in the value it is (``$.items[0].name``); at most ``MAX_PROBLEMS`` are reported.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable
from typing import Any

from tool_registry.json_schema import compile_pattern, resolve

MAX_PROBLEMS = 20
MAX_STEPS_DEEP = 256
"""Deepest chain of schema steps (nesting plus ``$ref`` hops) one value may take."""


def validate(schema: dict[str, Any], value: Any) -> list[str]:
    """The problems of ``value`` against ``schema`` (empty: valid)."""
    return _Validator(schema).errors(schema, value, "$", 0)[:MAX_PROBLEMS]


def _canon(value: Any) -> Any:
    """A hashable form under which JSON-equal values are equal (``1 == 1.0``, ``1 != true``)."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", int(value) if isinstance(value, float) and value.is_integer() else value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(_canon(v) for v in value))
    if isinstance(value, dict):
        return ("o", tuple(sorted((k, _canon(v)) for k, v in value.items())))
    return ("?", repr(value))


def _type_of(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return set()


_NAMES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
          (list, "array"), (dict, "object"), (type(None), "null"))


def _name(value: Any) -> str:
    return next((name for kind, name in _NAMES if isinstance(value, kind)), "?")


class _Validator:
    """One validation: the root (what ``$ref`` resolves against) and compiled patterns."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.patterns: dict[str, Any] = {}

    def errors(self, schema: Any, value: Any, at: str, depth: int) -> list[str]:
        """Problems of ``value`` (at ``at``) against ``schema``."""
        if schema is True:
            return []
        if schema is False:
            return [f"{at}: not allowed here"]
        if depth > MAX_STEPS_DEEP:
            return [f"{at}: nested too deep to validate"]
        out: list[str] = []
        if "$ref" in schema:
            out += self.errors(resolve(self.root, schema["$ref"]), value, at, depth + 1)
        kinds = schema.get("type")
        if kinds is not None:
            allowed = [kinds] if isinstance(kinds, str) else list(kinds)
            if not _type_of(value) & set(allowed):
                return [*out, f"{at}: expected {' or '.join(allowed)}, got {_name(value)}"]
        out += self._values(schema, value, at)
        out += self._combined(schema, value, at, depth)
        if isinstance(value, dict):
            out += self._object(schema, value, at, depth)
        elif isinstance(value, list):
            out += self._array(schema, value, at, depth)
        elif isinstance(value, str):
            out += self._string(schema, value, at)
        elif _type_of(value) & {"number"}:
            out += _number(schema, value, at)
        return out

    def _values(self, schema: dict[str, Any], value: Any, at: str) -> list[str]:
        canon = _canon(value)
        if "const" in schema and canon != _canon(schema["const"]):
            return [f"{at}: must be {_short(schema['const'])}"]
        if "enum" in schema and canon not in {_canon(v) for v in schema["enum"]}:
            return [f"{at}: must be one of {_short(schema['enum'])}"]
        return []

    def _combined(self, schema: dict[str, Any], value: Any, at: str, depth: int) -> list[str]:
        out: list[str] = []
        for sub in schema.get("allOf", []):
            out += self.errors(sub, value, at, depth + 1)
        if "anyOf" in schema:
            branches = [self.errors(s, value, at, depth + 1) for s in schema["anyOf"]]
            if all(branches):
                out.append(f"{at}: matches none of the anyOf choices ({branches[0][0]})")
        if "oneOf" in schema:
            passing = sum(not self.errors(s, value, at, depth + 1) for s in schema["oneOf"])
            if passing != 1:
                out.append(f"{at}: must match exactly one of the oneOf choices "
                           f"(matches {passing})")
        if "not" in schema and not self.errors(schema["not"], value, at, depth + 1):
            out.append(f"{at}: matches a schema it must not match")
        return out

    def _object(self, schema: dict[str, Any], value: dict[str, Any], at: str,
                depth: int) -> list[str]:
        out = [f"{at}.{name}: required" for name in schema.get("required", [])
               if name not in value]
        props: dict[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            where = f"{at}.{key}"
            if key in props:
                out += self.errors(props[key], item, where, depth + 1)
            elif extra is False:
                out.append(f"{where}: unexpected property")
            elif isinstance(extra, dict):
                out += self.errors(extra, item, where, depth + 1)
        out += _count(schema, len(value), "minProperties", "maxProperties", "properties", at)
        return out

    def _array(self, schema: dict[str, Any], value: list[Any], at: str,
               depth: int) -> list[str]:
        out: list[str] = []
        prefix: list[Any] = schema.get("prefixItems", [])
        rest = schema.get("items", True)
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else rest
            out += self.errors(sub, item, f"{at}[{i}]", depth + 1)
        out += _count(schema, len(value), "minItems", "maxItems", "items", at)
        if schema.get("uniqueItems") and len({_canon(v) for v in value}) < len(value):
            out.append(f"{at}: items must be unique")
        return out

    def _string(self, schema: dict[str, Any], value: str, at: str) -> list[str]:
        out = _count(schema, len(value), "minLength", "maxLength", "characters", at)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            if pattern not in self.patterns:
                self.patterns[pattern] = compile_pattern(pattern)
            if self.patterns[pattern].search(value) is None:
                out.append(f"{at}: must match the pattern {pattern!r}")
        return out


def _count(schema: dict[str, Any], n: int, low: str, high: str, what: str,
           at: str) -> list[str]:
    if low in schema and n < schema[low]:
        return [f"{at}: at least {schema[low]} {what} (got {n})"]
    if high in schema and n > schema[high]:
        return [f"{at}: at most {schema[high]} {what} (got {n})"]
    return []


_BOUNDS: tuple[tuple[str, Callable[[float, float], bool], str], ...] = (
    ("minimum", operator.ge, "at least"), ("maximum", operator.le, "at most"),
    ("exclusiveMinimum", operator.gt, "above"), ("exclusiveMaximum", operator.lt, "below"))


def _number(schema: dict[str, Any], value: float, at: str) -> list[str]:
    out = [f"{at}: must be {words} {schema[key]}" for key, ok, words in _BOUNDS
           if key in schema and not ok(value, schema[key])]
    step = schema.get("multipleOf")
    if step is not None and not _multiple(value, step):
        out.append(f"{at}: must be a multiple of {step}")
    return out


def _multiple(value: float, step: float) -> bool:
    if isinstance(value, int) and isinstance(step, int):
        return value % step == 0
    quotient = value / step
    return math.isfinite(quotient) and math.isclose(quotient, round(quotient), abs_tol=1e-9)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else text[:200] + "…"
