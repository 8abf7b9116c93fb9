"""The response-format schemas we take (``tool_registry.json_schema``) and how values are held
to them (``tool_registry.json_validate``): strict JSON semantics, no coercion."""

from __future__ import annotations

from typing import Any

import pytest

from tool_registry.json_schema import SchemaProblem, check_schema, strict_problem
from tool_registry.json_validate import MAX_PROBLEMS, validate


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


@pytest.mark.parametrize(("schema", "pointer"), [
    ([], ""),
    ({"type": "string"}, "/type"),
    (obj(a={"type": "strin"}), "/properties/a/type"),
    (obj(a={"type": ["string", "string"]}), "/properties/a/type"),
    ({"type": "object", "if": {}}, "/if"),
    ({"type": "object", "patternProperties": {}}, "/patternProperties"),
    (obj(a={"$ref": "#/$defs/missing"}), "/properties/a/$ref"),
    (obj(a={"$ref": "https://example.com/s.json"}), "/properties/a/$ref"),
    ({"type": "object", "$ref": "#"}, "/$ref"),
    ({"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
     "/$defs/a/$ref"),
    (obj(a={"type": "string", "pattern": "(?=x)"}), "/properties/a/pattern"),
    (obj(a={"type": "string", "minLength": -1}), "/properties/a/minLength"),
    (obj(a={"type": "number", "multipleOf": 0}), "/properties/a/multipleOf"),
    (obj(a={"anyOf": []}), "/properties/a/anyOf"),
    (obj(a=3), "/properties/a"),
    ({"type": "object", "required": "a"}, "/required"),
])
def test_schemas_we_cannot_hold_answers_to_are_refused(schema: Any, pointer: str) -> None:
    with pytest.raises(SchemaProblem) as caught:
        check_schema(schema)
    assert caught.value.pointer == pointer


def test_supported_keywords_and_annotations_pass() -> None:
    check_schema({
        "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "T",
        "type": "object", "x-vendor": 1, "discriminator": {"propertyName": "k"},
        "properties": {"tree": {"$ref": "#/$defs/node"}, "when": {"type": "string",
                                                                    "format": "date-time"},
                       "pair": {"type": "array", "prefixItems": [{"type": "string"}],
                                "items": False, "uniqueItems": True}},
        "$defs": {"node": {"type": "object", "properties": {
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "not": {"required": ["bad"]}, "oneOf": [{"minProperties": 0}, False]}}})


def test_strict_needs_closed_objects_with_every_property_required() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": False}
    assert strict_problem(closed) is None
    open_one = {**closed, "additionalProperties": True}
    assert "additionalProperties" in str(strict_problem(open_one))
    optional = {**closed, "required": []}
    problem = strict_problem(optional)
    assert problem is not None and problem.pointer == "" and "'a'" in problem.problem
    nested = {**closed, "properties": {"a": obj(b={"type": "string"})}}
    problem = strict_problem(nested)
    assert problem is not None and problem.pointer == "/properties/a"
    unsupported = {**closed, "properties": {"a": {"type": "string", "minLength": 1}}}
    assert "minLength" in str(strict_problem(unsupported))


ITEM = {"type": "object", "properties": {
    "n": {"type": "integer", "minimum": 1, "exclusiveMaximum": 10, "multipleOf": 2},
    "s": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
    "e": {"enum": [1, "x", None]}, "c": {"const": True}},
    "required": ["n"], "additionalProperties": False}


@pytest.mark.parametrize(("value", "problems"), [
    ({"n": 2}, []),
    ({"n": 2.0, "e": 1.0, "c": True}, []),
    ({"n": "2"}, ["$.n: expected integer, got string"]),
    ({"n": True}, ["$.n: expected integer, got boolean"]),
    ({"n": 2.5}, ["$.n: expected integer, got number"]),
    ({"n": -1}, ["$.n: must be at least 1", "$.n: must be a multiple of 2"]),
    ({"n": 10}, ["$.n: must be below 10"]),
    ({"n": 2, "e": True}, ['$.e: must be one of [1, "x", null]']),
    ({"n": 2, "c": 1}, ["$.c: must be true"]),
    ({"n": 2, "s": "abcdef"}, ["$.s: at most 5 characters (got 6)"]),
    ({"n": 2, "s": "AB"}, ["$.s: must match the pattern '^[a-z]+$'"]),
    ({"n": 2, "z": 1}, ["$.z: unexpected property"]),
    ({}, ["$.n: required"]),
    ([], ["$: expected object, got array"]),
])
def test_values_are_held_to_the_schema_without_coercion(value: Any, problems: list[str]) -> None:
    assert validate(ITEM, value) == problems


def test_refs_combinators_and_arrays() -> None:
    tree = {"type": "object", "properties": {"kids": {"type": "array",
                                                       "items": {"$ref": "#"}}}}
    assert validate(tree, {"kids": [{"kids": []}, {"kids": [{}]}]}) == []
    assert validate(tree, {"kids": [{"kids": [3]}]}) == [
        "$.kids[0].kids[0]: expected object, got integer"]
    one = {"oneOf": [{"type": "integer"}, {"type": "number"}]}
    assert validate(one, 1.5) == []
    assert "exactly one" in validate(one, 1)[0]
    assert validate({"anyOf": [{"type": "string"}, {"type": "null"}]}, None) == []
    assert "none of the anyOf" in validate({"anyOf": [{"type": "string"}]}, 1)[0]
    assert validate({"allOf": [{"minimum": 1}, {"maximum": 2}]}, 3) == ["$: must be at most 2"]
    assert validate({"not": {"type": "null"}}, None) == [
        "$: matches a schema it must not match"]
    pair = {"type": "array", "prefixItems": [{"type": "string"}], "items": False,
            "minItems": 1, "uniqueItems": True}
    assert validate(pair, ["a"]) == []
    assert validate(pair, ["a", "b"]) == ["$[1]: not allowed here"]
    assert validate(pair, []) == ["$: at least 1 items (got 0)"]
    assert validate({"uniqueItems": True}, [1, 1.0]) == ["$: items must be unique"]
    assert validate({"uniqueItems": True}, [1, True, {"a": [1]}, {"a": [True]}]) == []
    extra = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert validate(extra, {"a": 1, "b": "x"}) == ["$.b: expected integer, got string"]


def test_problems_are_capped_and_depth_is_bounded() -> None:
    many = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)},
            "required": [f"p{i}" for i in range(40)]}
    assert len(validate(many, {})) == MAX_PROBLEMS
    deep: Any = []
    for _ in range(400):
        deep = [deep]
    nested = {"type": "array", "items": {"$ref": "#"}}
    [problem] = validate(nested, deep)  # each level: an items step and a $ref hop
    assert problem == f"${'[0]' * 129}: nested too deep to validate"
