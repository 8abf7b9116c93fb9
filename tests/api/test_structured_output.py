"""Structured output over HTTP (issue 30): ``response_format`` at every door, ``Run.output`` and
``agent_end.output``, ``output_invalid``, and the 422s naming the field. On both backends."""

from __future__ import annotations

from typing import Any

import pytest

from providers import fake
from tests.api.conftest import Api
from tests.api.test_one_pipeline import DOORS, field, post
from tests.support.errors import api_error
from tests.support.sse_client import read_all

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
GOOD = '{"city": "Paris", "temp": 21.5}'


async def end_of(api: Api, run_id: str) -> dict[str, Any]:
    frames = await read_all(api.client, f"/runs/{run_id}/events")
    ends = [f.data for f in frames if f.data.get("type") == "agent_end"]
    assert len(ends) == 1
    return ends[0]


async def test_output_is_on_the_run_and_its_agent_end(api: Api) -> None:
    api.fake.script = [fake.text("It is sunny"), fake.text(GOOD)]
    run = await api.create(input="weather in Paris?", response_format=FORMAT)
    assert run["output"] is None
    done = await api.wait_status(run["id"], "completed")
    assert done["stop_reason"] == "stop" and done["error"] is None
    assert done["output"] == {"city": "Paris", "temp": 21.5}
    assert done["result"] == GOOD
    assert [m["role"] for m in done["messages"]] == ["user", "assistant", "user", "assistant"]
    end = await end_of(api, run["id"])
    assert end["output"] == {"city": "Paris", "temp": 21.5}
    sent = api.fake.requests[0].response_format
    assert sent is not None and (sent.name, sent.schema, sent.strict) == ("weather", SCHEMA,
                                                                          False)


async def test_output_invalid_fails_the_run(api: Api) -> None:
    api.fake.script = [fake.text("sunny"), fake.text('{"city": "Paris"}')]
    run = await api.create(response_format=FORMAT)
    done = await api.wait_status(run["id"], "failed")
    assert done["stop_reason"] == "output_invalid" and done["output"] is None
    assert done["error"] == ('the final answer does not match the response format "weather" '
                             "after one corrective retry: $.temp: required")
    end = await end_of(api, run["id"])
    assert end["stop_reason"] == "output_invalid" and "output" not in end


async def test_text_means_no_format(api: Api) -> None:
    api.fake.script = [fake.text("plain")]
    run = await api.create(response_format={"type": "text"})
    done = await api.wait_status(run["id"], "completed")
    assert done["output"] is None and done["result"] == "plain"
    assert api.fake.requests[0].response_format is None


@pytest.mark.parametrize("door", DOORS)
async def test_every_door_takes_response_format(api: Api, door: str) -> None:
    api.fake.script = [fake.text(GOOD)]
    resp = await post(api, door, f"chat-format-{door}", response_format=FORMAT)
    assert resp.status_code in (200, 201, 202), resp.text
    [run] = (await api.client.get("/runs")).json()["runs"]
    done = await api.wait_status(run["id"], "completed")
    assert done["output"] == {"city": "Paris", "temp": 21.5}


def with_schema(schema: Any, **spec: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "f", "schema": schema, **spec}}


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(("response_format", "name", "says"), [
    (with_schema({"type": "array"}), "response_format.json_schema.schema",
     'at /type: the top level must be an object schema (type "object")'),
    (with_schema({"type": "object", "properties": {"a": {"if": {}}}}),
     "response_format.json_schema.schema", "at /properties/a/if: agentloop does not validate"),
    (with_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/b"}}}),
     "response_format.json_schema.schema", "is no local reference"),
    (with_schema(SCHEMA | {"required": ["city"]}, strict=True),
     "response_format.json_schema.schema",
     "strict mode needs every property required (missing 'temp') (or set strict: false)"),
    (with_schema({"type": "object", "description": "x" * 70_000}),
     "response_format.json_schema.schema", "at most 65536 bytes of JSON"),
    ({"type": "json_object"}, "response_format.type", "'json_schema' or 'text'"),
    ({"type": "json_schema"}, "response_format", "json_schema is required"),
    ({"type": "json_schema", "json_schema": {"name": "a b", "schema": SCHEMA}},
     "response_format.json_schema.name", "should match pattern"),
    ({"type": "json_schema", "json_schema": {"name": "f", "schema": SCHEMA, "strict": "yes"}},
     "response_format.json_schema.strict", "valid boolean"),
])
async def test_bad_formats_are_422_naming_the_field_at_every_door(
        api: Api, door: str, response_format: dict[str, Any], name: str, says: str) -> None:
    resp = await post(api, door, f"chat-bad-{door}", response_format=response_format)
    assert resp.status_code == 422, resp.text
    error = api_error(resp)
    assert error["code"] == "validation_error" and error["field"] == field(door, name), error
    assert says in error["message"], error
    assert not (await api.client.get("/runs")).json()["runs"]
