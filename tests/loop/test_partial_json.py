"""The partial-JSON parser never raises on any prefix of valid JSON."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from providers.partial_json import parse_complete_object, parse_partial_object

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5), st.data())
def test_every_prefix_parses_without_raising(obj: dict, data: st.DataObject) -> None:
    text = json.dumps(obj, ensure_ascii=data.draw(st.booleans()))
    for end in range(len(text) + 1):
        assert isinstance(parse_partial_object(text[:end]), dict)
    assert parse_partial_object(text) == obj
    assert parse_complete_object(text) == (obj, None)


def test_trailing_strings_are_kept() -> None:
    assert parse_partial_object('{"path": "/tm') == {"path": "/tm"}
    assert parse_partial_object("") == {}
    assert parse_partial_object("[1, 2") == {}
    assert parse_complete_object("") == ({}, None)
    args, err = parse_complete_object('{"a": 1')
    assert args == {"a": 1} and err is not None
