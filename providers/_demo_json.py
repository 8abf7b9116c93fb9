"""The demo model's structured answers: a JSON value for a response format's schema, built
deterministically from the reply it would have given in text.

Strings take that reply (cut or padded to the length bounds), numbers the numbers it holds in
order (clamped to the bounds), enums and consts their first value, arrays their least length
(at least one item), objects every property, ``anyOf``/``oneOf`` their first non-null choice.
Patterns, ``not`` and ``uniqueItems`` are not aimed at: a schema leaning on them may get an
invalid value (the run then shows the retry and ``output_invalid``).
"""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_DEPTH = 16


class Example:
    """Values for one schema, drawing numbers from ``text`` in order."""

    def __init__(self, root: dict[str, Any], text: str) -> None:
        self.root = root
        self.text = text
        self.numbers = [float(n) for n in _NUMBER.findall(text)]

    def value(self, schema: Any, depth: int = 0) -> Any:
        """A value for ``schema`` (see the module docstring)."""
        if not isinstance(schema, dict) or depth > _DEPTH:
            return None
        if "$ref" in schema:
            return self.value(_resolve(self.root, schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf", "allOf"):
            if schema.get(key):
                choices = [s for s in schema[key] if not _null(s)] or schema[key]
                return self.value(choices[0], depth + 1)
        return self._typed(schema, _kind(schema), depth)

    def _typed(self, schema: dict[str, Any], kind: str, depth: int) -> Any:
        if kind == "object":
            props: dict[str, Any] = schema.get("properties", {})
            return {name: self.value(sub, depth + 1) for name, sub in props.items()}
        if kind == "array":
            count = max(1, int(schema.get("minItems", 1)))
            count = min(count, int(schema.get("maxItems", count)))
            return [self.value(schema.get("items", {}), depth + 1) for _ in range(count)]
        if kind in ("integer", "number"):
            return self._number(schema, kind)
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        return self._string(schema)

    def _number(self, schema: dict[str, Any], kind: str) -> float | int:
        value = self.numbers.pop(0) if self.numbers else 0.0
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        if low is not None and value < low:
            value = low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        if high is not None and value > high:
            value = high - (1 if "exclusiveMaximum" in schema and "maximum" not in schema else 0)
        return int(value) if kind == "integer" else value

    def _string(self, schema: dict[str, Any]) -> str:
        text = self.text
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        if high is not None:
            text = text[:int(high)]
        return text + "." * max(0, low - len(text))


def _kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return str(kind)


def _null(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null"


def _resolve(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for token in ref.removeprefix("#").strip("/").split("/") if ref != "#" else []:
        token = token.replace("~1", "/").replace("~0", "~")
        node = node.get(token) if isinstance(node, dict) else None
    return node
