"""Hostile input over a real socket: every answer is a 4xx naming the field (never a 500 or a
hung stream), and the server keeps serving others meanwhile. Several cases are regressions of
schemathesis findings (a >64-bit ``max_iterations`` was a 500)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from providers import fake
from tests.api.conftest import Api
from tests.api.test_validation import _error

JSON = {"Content-Type": "application/json"}


async def _post_raw(api: Api, path: str, body: bytes) -> httpx.Response:
    return await api.client.post(path, content=body, headers=JSON)


@pytest.mark.parametrize(("body", "field"), [
    (b'{"input": "hi", "max_iterations": -61266238163622813696}', "max_iterations"),
    (b'{"input": "hi", "max_tokens": 99999999999999999999999}', "max_tokens"),
])
async def test_integers_wider_than_64_bits_are_422(api_no_worker: Api, body: bytes,
                                                    field: str) -> None:
    _error(await _post_raw(api_no_worker, "/runs", body), 422, field, "validation_error")


@pytest.mark.parametrize("body", [
    b'{"input": "hi", "temperature": NaN}',
    b'{"input": "hi", "temperature": Infinity}',
    b'{"input": "hi", "temperature": -Infinity}',
    b'{"input": "hi", "temperature": 1e400}',
    b'{"input": "hi", "metadata": {"k": "\\ud800"}}',
    b'{"input": "\\udfff x"}',
    b'{"input": "\xff\xfe"}',
    b'\xef\xbb\xbf{"input": "hi"}',
    b'[' * 100_000 + b']' * 100_000,
    b'{"input": ' + b'[' * 2000 + b']' * 2000 + b'}',
])
async def test_json_the_store_cannot_write_is_400(api_no_worker: Api, body: bytes) -> None:
    _error(await _post_raw(api_no_worker, "/runs", body), 400, None, "invalid_json")


async def test_hostile_steer_bodies_are_400(api_no_worker: Api) -> None:
    run = await api_no_worker.create()
    for body in (b'{"content": "\\ud800"}', b'{"content": NaN}', b'[' * 100_000):
        _error(await _post_raw(api_no_worker, f"/runs/{run['id']}/steer", body), 400, None,
               "invalid_json")


async def test_a_64_bit_integer_in_tool_arguments_is_kept(api_no_worker: Api) -> None:
    history = [{"role": "user", "content": "a"},
               {"role": "assistant", "content": [{"type": "tool_call", "id": "c1", "name": "x",
                                                  "arguments": {"n": 2**64 - 1}}]},
               {"role": "tool_result", "tool_call_id": "c1", "tool_name": "x",
                "content": [{"type": "text", "text": "ok"}], "is_error": False}]
    run = await api_no_worker.create(input=history)
    assert run["messages"][1]["content"][0]["arguments"] == {"n": 2**64 - 1}


async def test_deep_nesting_neither_crashes_nor_stalls(api_no_worker: Api) -> None:
    body = b'{"input": "hi", "metadata": ' + b'[' * 100_000 + b']' * 100_000 + b'}'
    started = time.monotonic()
    results = await asyncio.gather(*(_post_raw(api_no_worker, "/runs", body) for _ in range(5)))
    assert all(r.status_code == 400 for r in results)
    assert time.monotonic() - started < 5
    assert (await api_no_worker.client.get("/healthz")).status_code == 200


async def test_a_slow_body_does_not_block_other_requests(api_no_worker: Api) -> None:
    host, port = api_no_worker.url.removeprefix("http://").split(":")
    _reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"inp")
        await writer.drain()
        for _ in range(3):  # a byte now and then; the body never completes
            started = time.monotonic()
            run = await api_no_worker.create(input="meanwhile")
            assert run["status"] == "queued"
            assert time.monotonic() - started < 1
            writer.write(b"u")
            await writer.drain()
    finally:
        writer.close()


async def test_an_oversized_declared_body_is_refused_before_it_is_sent(api_no_worker: Api
                                                                       ) -> None:
    host, port = api_no_worker.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 2000000\r\n\r\n{")
        async with asyncio.timeout(5):
            answer = await reader.readuntil(b"\r\n\r\n")
            answer += await reader.read(4096)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b'"body_too_large"' in answer


@pytest.mark.parametrize("content_type", [
    "application/json; charset=utf-8", "application/json;charset=UTF-8",
    "Application/JSON", "application/merge-patch+json",
])
async def test_json_content_types_with_parameters_are_accepted(api_no_worker: Api,
                                                               content_type: str) -> None:
    resp = await api_no_worker.client.post("/runs", content=b'{"input": "hi"}',
                                           headers={"Content-Type": content_type})
    assert resp.status_code == 201, resp.text


async def test_idempotency_key_length_is_bounded(api_no_worker: Api) -> None:
    c = api_no_worker.client
    ok = await c.post("/runs", json={"input": "hi"}, headers={"Idempotency-Key": "k" * 255})
    assert ok.status_code == 201, ok.text
    resp = await c.post("/runs", json={"input": "hi"}, headers={"Idempotency-Key": "k" * 256})
    _error(resp, 422, "Idempotency-Key", "validation_error")
    resp = await c.post("/runs", json={"input": "hi"}, headers={"Idempotency-Key": "k" * 20000})
    assert 400 <= resp.status_code < 500


@pytest.mark.parametrize("run_id", [
    "..%2F..%2Fetc%2Fpasswd", "%2E%2E", "%E2%98%83", "run_%00", "run_%F0%9F%92%A5", "a" * 5000,
    "run_" + "0" * 32 + "%0D%0Aset x 1", "%ED%A0%80",
])
async def test_odd_run_ids_are_404(api_no_worker: Api, run_id: str) -> None:
    c = api_no_worker.client
    for resp in (await c.get(f"/runs/{run_id}"), await c.get(f"/runs/{run_id}/events"),
                 await c.get(f"/runs/{run_id}/queue"), await c.post(f"/runs/{run_id}/cancel"),
                 await c.post(f"/runs/{run_id}/steer", json={"content": "x"}),
                 await c.post(f"/runs/{run_id}/follow_up", json={"content": "x"}),
                 await c.delete(f"/runs/{run_id}/queue/msg_1")):
        _error(resp, 404, None)


@pytest.mark.parametrize("after", ["²", "١٢", "-1", "1e3", "+1", "9" * 5000, str(2**63),
                                   str(10**30)])
async def test_bad_resume_points_are_422(api_no_worker: Api, after: str) -> None:
    run = await api_no_worker.create()
    c = api_no_worker.client
    _error(await c.get(f"/runs/{run['id']}/events", params={"after": after}), 422, "after")
    resp = await c.get(f"/runs/{run['id']}/events", headers={"Last-Event-ID": after.encode()})
    _error(resp, 422, "Last-Event-ID")


async def test_the_largest_resume_point_of_an_ended_run_is_204(api: Api) -> None:
    api.fake.script = [fake.text("done")]
    run = await api.create(tools=[])
    await api.wait_status(run["id"], "completed")
    resp = await api.client.get(f"{run['events_url']}?after={2**63 - 1}")
    assert resp.status_code == 204 and resp.content == b""
    resp = await api.client.get(run["events_url"], headers={"Last-Event-ID": str(2**63 - 1)})
    assert resp.status_code == 204 and resp.content == b""


@pytest.mark.parametrize("limit", ["0", "-1", "101", str(10**30), "abc", "1.5", "²"])
async def test_bad_limits_are_422(api_no_worker: Api, limit: str) -> None:
    _error(await api_no_worker.client.get("/runs", params={"limit": limit}), 422, "limit")


@pytest.mark.parametrize("cursor", ["garbage", "nan|run_x", "inf|run_x", "1e400|run_x",
                                    "1.0|../x", "1.0|", "|"])
async def test_bad_cursors_are_422(api_no_worker: Api, cursor: str) -> None:
    _error(await api_no_worker.client.get("/runs", params={"cursor": cursor}), 422, "cursor")


async def test_metadata_filters_with_odd_keys(api_no_worker: Api) -> None:
    odd = {"../x": "1", "☃ snow": "❄", "a|b": "c=d&e", "k" * 64: "v" * 512}
    run = await api_no_worker.create(metadata=odd)
    for key, value in odd.items():
        resp = await api_no_worker.client.get("/runs", params={f"metadata.{key}": value})
        assert resp.status_code == 200, resp.text
        assert [r["id"] for r in resp.json()["runs"]] == [run["id"]]
    resp = await api_no_worker.client.get("/runs", params={"metadata.": "x"})
    assert resp.status_code == 200  # "metadata." alone is no filter at all
    resp = await api_no_worker.client.get("/runs", params={"metadata.../x": "2"})
    assert resp.json()["runs"] == []


@pytest.mark.parametrize(("content", "field"), [
    ([{"type": "image", "mime_type": "image/png"}], "content[0].data"),
    ([{"type": "image", "data": "", "mime_type": "image/png"}], "content[0].data"),
    ([{"type": "image", "data": "not base64!", "mime_type": "image/png"}], "content[0].data"),
    ([{"type": "image", "data": "aGk=", "mime_type": "text/plain"}], "content[0].mime_type"),
    ([{"type": "image", "data": "aGk="}], "content[0].mime_type"),
    ([{"type": "text", "text": ""}], "content[0].text"),
    ([{"type": "text", "text": "ok"}, {"type": "text", "text": "  "}], "content[1].text"),
    ([{"type": "video", "data": "x"}], "content[0]"),
    ([], "content"),
    ("", "content"),
    ("   \n", "content"),
    (None, "content"),
    ({"text": "x"}, "content"),
])
async def test_steer_content_of_the_wrong_shape_is_422(api_no_worker: Api, content: Any,
                                                       field: str) -> None:
    run = await api_no_worker.create()
    resp = await api_no_worker.client.post(f"/runs/{run['id']}/steer", json={"content": content})
    _error(resp, 422, field, "validation_error")
    queue = await api_no_worker.client.get(f"/runs/{run['id']}/queue")
    assert queue.json() == {"messages": []}


async def test_blank_input_is_422(api_no_worker: Api) -> None:
    _error(await api_no_worker.client.post("/runs", json={"input": " "}), 422, "input")
    resp = await api_no_worker.client.post("/runs", json={"input": [
        {"role": "user", "content": [{"type": "image", "data": "@@", "mime_type": "image/png"}]}]})
    _error(resp, 422, "input[0].content[0].data")


async def test_a_good_image_and_a_big_steer(api_no_worker: Api) -> None:
    run = await api_no_worker.create()
    url = f"/runs/{run['id']}/steer"
    image = [{"type": "image", "data": "iVBORw0KGgo=", "mime_type": "image/png"}]
    ok = await api_no_worker.client.post(url, json={"content": image})
    assert ok.status_code == 202, ok.text
    _error(await api_no_worker.client.post(url, json={"content": "x" * 2_000_000}), 413, None,
           "body_too_large")
    near = await api_no_worker.client.post(url, json={"content": "x" * 1_000_000})
    assert near.status_code == 202, near.text


@pytest.mark.parametrize("key", ["å?²쿀þ", "a\r\nx-injected: 1", "50%", "emoji 🇺🇸"])
async def test_a_field_named_by_any_key_is_a_422_on_the_plain_text_door(api_no_worker: Api,
                                                                       key: str) -> None:
    """A schemathesis finding: the field of an error names the key the client sent, and the
    plain-text door (``/ai-sdk/``) puts it in a header, which carries printable ASCII only:
    a key outside it was a 500 (latin-1), and a line break in it must not make a header."""
    from urllib.parse import unquote

    from tests.support.errors import api_error

    body = {"id": "c1", "messages": [{"id": "m1", "role": "user",
                                      "parts": [{"type": "text", "text": "hi"}]}],
            "response_format": {"type": "json_schema", key: True}}
    resp = await api_no_worker.client.post("/ai-sdk/chat", json=body)
    assert resp.status_code == 422, resp.text
    raw = resp.headers["x-agentloop-error-field"]
    assert raw.isascii() and raw.isprintable() and " " not in raw
    assert "x-injected" not in resp.headers
    field = unquote(raw)
    assert field == f"response_format.{key}" and field in resp.text
    assert api_error(resp)["code"] == resp.headers["x-agentloop-error-code"]
