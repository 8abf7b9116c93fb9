"""Bad input → the exact 4xx status and the API.md error body naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api


def _error(resp: Any, status: int, field: str | None, code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "field"}
    assert body["error"]["field"] == field, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("body", "status", "field", "code"), [
    ({}, 422, "input", "validation_error"),
    ({"input": 5}, 422, "input", "validation_error"),
    ({"input": "hi", "model": "nocolon"}, 400, "model", "invalid_model"),
    ({"input": "hi", "model": "nosuch:model"}, 400, "model", "invalid_model"),
    ({"input": "hi", "tools": ["read_file", "no_such_tool"]}, 400, "tools[1]", "unknown_tool"),
    ({"input": "hi", "toolset": "no_such_set"}, 400, "toolset", "unknown_toolset"),
    ({"input": "hi", "tool_choice": "sometimes"}, 422, "tool_choice", None),
    ({"input": "hi", "tool_choice": {"type": "function"}}, 422, "tool_choice", None),
    ({"input": "hi", "tools": [], "tool_choice": {"type": "function", "name": "read_file"}},
     400, "tool_choice", "invalid_tool_choice"),
    ({"input": "hi", "max_iterations": "5"}, 422, "max_iterations", None),
    ({"input": "hi", "max_iterations": True}, 422, "max_iterations", None),
    ({"input": "hi", "max_iterations": 2.5}, 422, "max_iterations", None),
    ({"input": "hi", "metadata": {"a": 1}}, 422, "metadata.a", None),
    ({"input": "hi", "steering_mode": "some"}, 422, "steering_mode", None),
    ({"input": "hi", "bogus": 1}, 422, "bogus", None),
    ({"input": []}, 422, "input", None),
    ({"input": [{"role": "user", "content": "a"}, {"role": "robot", "content": "x"}]},
     422, "input[1]", None),
    ({"input": [{"role": "user", "content": "a"}, {"role": "assistant", "content": []},
                {"role": "user", "content": 7}]}, 422, "input[2].content", None),
    ({"input": [{"role": "user", "content": [{"type": "text"}]}]}, 422,
     "input[0].content[0].text", None),
])
async def test_create_rejects_bad_bodies(api_no_worker: Api, body: dict[str, Any], status: int,
                                         field: str | None, code: str | None) -> None:
    resp = await api_no_worker.client.post("/runs", json=body)
    _error(resp, status, field, code)


async def test_malformed_json_is_400(api_no_worker: Api) -> None:
    resp = await api_no_worker.client.post(
        "/runs", content=b'{"input": "hi",', headers={"Content-Type": "application/json"})
    _error(resp, 400, None, "invalid_json")


async def test_wrong_content_type_is_415(api_no_worker: Api) -> None:
    resp = await api_no_worker.client.post("/runs", content=b"input=hi",
                                           headers={"Content-Type": "text/plain"})
    _error(resp, 415, None, "unsupported_media_type")


async def test_missing_body_is_422(api_no_worker: Api) -> None:
    _error(await api_no_worker.client.post("/runs"), 422, None, "validation_error")


async def test_oversized_body_is_413_declared_and_streamed(api_no_worker: Api) -> None:
    big = b'{"input": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    resp = await api_no_worker.client.post("/runs", content=big,
                                           headers={"Content-Type": "application/json"})
    _error(resp, 413, None, "body_too_large")

    async def chunks():  # no Content-Length: counted while read
        yield b'{"input": "'
        for _ in range(40):
            yield b"y" * 65536
        yield b'"}'

    resp = await api_no_worker.client.post("/runs", content=chunks(),
                                           headers={"Content-Type": "application/json"})
    _error(resp, 413, None, "body_too_large")


async def test_unknown_routes_methods_and_runs(api_no_worker: Api) -> None:
    c = api_no_worker.client
    _error(await c.get("/nope"), 404, None, "not_found")
    _error(await c.delete("/runs"), 405, None, "method_not_allowed")
    _error(await c.get("/runs/run_missing"), 404, None, "run_not_found")
    _error(await c.get("/runs/run_missing/events"), 404, None, "run_not_found")
    _error(await c.post("/runs/run_missing/steer", json={"content": "x"}), 404, None)
    _error(await c.post("/runs/run_missing/cancel"), 404, None)
    _error(await c.get("/runs?status=weird"), 422, "status")
    _error(await c.get("/runs?limit=0"), 422, "limit")


async def test_bad_steer_content_names_the_field(api_no_worker: Api) -> None:
    run = await api_no_worker.create()
    resp = await api_no_worker.client.post(f"/runs/{run['id']}/steer",
                                           json={"content": [{"type": "text", "text": 3}]})
    _error(resp, 422, "content[0].text")
    _error(await api_no_worker.client.post(f"/runs/{run['id']}/steer", json={}), 422, "content")


async def test_one_bad_request_does_not_affect_others(api_no_worker: Api) -> None:
    await api_no_worker.client.post("/runs", content=b"{", headers={"Content-Type":
                                                                     "application/json"})
    run = await api_no_worker.create(input="fine")
    assert run["status"] == "queued"
