"""Hypothesis-generated hostile bodies for ``POST /runs`` and ``/steer`` against one live server:
each answer is a 201/202 or a 4xx with the API.md error body, never a 5xx, and a normal run
created afterwards still completes. Bounded: a fixed number of examples, no shrinking database,
a few seconds in all."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.process.main import create_app
from app.store.memory.backend import MemoryBackend
from providers import fake
from providers.base import ModelRequest
from tests.api.conftest import fake_resolver, make_settings
from tests.support.live_server import LiveServer

EXAMPLES = 200
FIELDS = ["model", "input", "system", "tools", "toolset", "tools_source", "tools_allow",
          "tools_deny", "tool_choice", "reset_tool_choice", "parallel_tool_calls",
          "max_iterations", "steering_mode", "follow_up_mode", "temperature", "max_tokens",
          "metadata"]

extremes = st.sampled_from([2**63, -(2**63) - 1, 2**64, -(10**30), float("nan"), float("inf"),
                            -float("inf"), 1e308, -0.0, "\ud800", "\udfff\x00", "x" * 5000])
scalars = (extremes | st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats() | st.text(max_size=20)
           | st.sampled_from(["", "fake:test", "demo:echo", "none", "all", "auto",
                              "one-at-a-time", "image", "user"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.sampled_from(
                          ["type", "role", "content", "text", "data", "name"]), inner,
                          max_size=4), max_leaves=12)
blocks = st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "tool_call", "x"])},
                               optional={"text": values, "data": values, "mime_type": values})


def run_bodies() -> st.SearchStrategy[Any]:
    """A valid body with some fields replaced by anything, plus unknown fields."""
    base = {"input": "hi", "tools": []}
    one_field = st.builds(lambda name, value: {**base, name: value}, st.sampled_from(FIELDS),
                          extremes | values)
    mutated = st.builds(lambda changes, extra: {**base, **changes, **extra},
                        st.dictionaries(st.sampled_from(FIELDS), values, max_size=4),
                        st.dictionaries(st.text(max_size=6), values, max_size=1))
    messages = st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool_result", "x"])},
        optional={"content": values | st.lists(blocks, max_size=3), "tool_call_id": values}),
        max_size=3).map(lambda m: {"input": m, "tools": []})
    return one_field | mutated | messages | values


def encoded(bodies: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Bodies as JSON the stdlib writes (NaN, lone surrogates), raw bytes, or deep nesting."""
    as_json = st.builds(lambda b, ascii_: json.dumps(b, ensure_ascii=ascii_).encode(
        "utf-8", "surrogatepass"), bodies, st.booleans())
    deep = st.integers(1000, 100_000).map(lambda n: b"[" * n + b"]" * n)
    return as_json | st.binary(max_size=64) | deep | st.just(b"")


def check_answer(resp: httpx.Response, ok: int) -> None:
    assert resp.status_code < 500, resp.text
    if resp.status_code in (ok, 200):
        return
    assert 400 <= resp.status_code < 500, resp.text
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "field"}, body
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    assert error["field"] is None or isinstance(error["field"], str)


def _reply(request: ModelRequest) -> fake.Step:
    first = request.messages[0] if request.messages else None
    if first is not None and first.content == "steer target":
        return fake.hanging()
    return fake.text("ok")


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[httpx.Client, str]]:
    provider = fake.FakeProvider(script=[_reply], repeat=True, record=False)
    app = create_app(make_settings(), backend=MemoryBackend(lease=5.0),
                     resolve_provider=fake_resolver(provider))
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        target = client.post("/runs", json={"input": "steer target", "tools": []}).json()["id"]
        yield client, target
        client.post(f"/runs/{target}/cancel")


FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(body=encoded(run_bodies()))
def test_post_runs_never_fails_on_a_hostile_body(live: tuple[httpx.Client, str],
                                                  body: bytes) -> None:
    client, _ = live
    check_answer(client.post("/runs", content=body,
                             headers={"Content-Type": "application/json"}), 201)


@FUZZ
@given(body=encoded(st.fixed_dictionaries({}, optional={"content": values | st.lists(
    blocks, max_size=3), "x": values}) | values))
def test_steer_never_fails_on_a_hostile_body(live: tuple[httpx.Client, str],
                                              body: bytes) -> None:
    client, target = live
    check_answer(client.post(f"/runs/{target}/steer", content=body,
                             headers={"Content-Type": "application/json"}), 202)


def test_a_normal_run_still_completes_afterwards(live: tuple[httpx.Client, str]) -> None:
    client, target = live
    run = client.post("/runs", json={"input": "after the fuzz", "tools": []}).json()
    deadline = time.monotonic() + 10
    while (got := client.get(f"/runs/{run['id']}").json())["status"] != "completed":
        assert time.monotonic() < deadline, got
        time.sleep(0.02)
    assert got["result"] == "ok"
    assert client.get(f"/runs/{target}").json()["status"] == "running"
