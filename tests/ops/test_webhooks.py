"""Signed webhooks to a real receiver on loopback (``tests.support.wire_server``), checked with
the ``standardwebhooks`` library: run ends and parkings, retries after failures, the SSRF
guard, and an outbox that outlives the service on Redis (issue 32)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from providers import fake
from tests.api.conftest import Api, serve
from tests.ops.conftest import redis_backend
from tests.support.wire_server import Recorded, Reply, WireServer

SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()
LOCATION = {"name": "get_location", "parameters": {"type": "object", "properties": {}}}


def ok(n: int = 1) -> list[Reply]:
    return [Reply(204, chunked=False) for _ in range(n)]


def failing(status: int = 503) -> Reply:
    return Reply(status, [b"down"], content_type="text/plain", chunked=False)


@asynccontextmanager
async def hooked(receiver: WireServer, backend: Any = None,
                 **overrides: Any) -> AsyncIterator[Api]:
    settings: dict[str, Any] = {"webhook_secret": SECRET,
                                "webhook_allow_urls": receiver.url + "/",
                                "webhook_retry_seconds": 0.05, "webhook_retry_cap": 0.2}
    async with serve(backend=backend, **{**settings, **overrides}) as api:
        yield api


async def until(check: Callable[[], Any], within: float = 15.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
    return value


def verified(request: Recorded) -> dict[str, Any]:
    """The body, once the library verifies its signature (it raises otherwise)."""
    return Webhook(SECRET).verify(request.body, request.headers)  # type: ignore[no-any-return]


async def deliveries(api: Api, run_id: str) -> list[dict[str, Any]]:
    resp = await api.client.get(f"/runs/{run_id}/webhooks")
    assert resp.status_code == 200, resp.text
    return resp.json()["webhooks"]  # type: ignore[no-any-return]


@pytest.fixture(params=["memory", "redis"])
def kind(request: pytest.FixtureRequest) -> Any:
    return None if request.param == "memory" else redis_backend(
        request.getfixturevalue("redis_url"))


async def test_a_run_end_is_signed_sent_and_shown(kind: Any) -> None:
    async with WireServer() as receiver, hooked(receiver, kind) as api:
        receiver.replies += ok()
        api.fake.script = [fake.text("done")]
        run = await api.create(input="hi", webhook=receiver.url + "/hooks/a?x=1")
        await until(lambda: receiver.requests)
        (request,) = receiver.requests
        body = verified(request)
        assert (request.method, request.path, request.query) == ("POST", "/hooks/a",
                                                                 {"x": ["1"]})
        assert body["type"] == "run.completed" and body["timestamp"].endswith("Z")
        assert body["data"] == {"run_id": run["id"], "thread_id": None,
                                "status": "completed", "stop_reason": "stop"}
        assert request.headers["webhook-signature"].startswith("v1,")
        (delivery,) = await _settled(api, run["id"])
        assert delivery["id"] == request.headers["webhook-id"]
        assert (delivery["type"], delivery["state"]) == ("run.completed", "delivered")
        assert [a["status"] for a in delivery["attempts"]] == [204]


async def _settled(api: Api, run_id: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        found = await deliveries(api, run_id)
        if found and all(d["state"] != "pending" for d in found):
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.02)


async def test_a_failing_receiver_gets_retries_with_the_same_id(kind: Any) -> None:
    async with WireServer() as receiver, hooked(receiver, kind) as api:
        receiver.replies += [failing(500), failing(503), *ok()]
        api.fake.script = [fake.error("the provider broke")]
        run = await api.create(input="hi", webhook=receiver.url + "/h")
        await until(lambda: len(receiver.requests) == 3)
        bodies = [verified(r) for r in receiver.requests]
        assert {b["type"] for b in bodies} == {"run.failed"}
        assert len({r.headers["webhook-id"] for r in receiver.requests}) == 1
        (delivery,) = await _settled(api, run["id"])
        assert [a["status"] for a in delivery["attempts"]] == [500, 503, 204]
        assert delivery["state"] == "delivered"


async def test_a_parking_and_the_tenant_default_webhook(kind: Any) -> None:
    async with WireServer() as receiver, hooked(
            receiver, kind, tenant_webhooks=f'{{"*": "{receiver.url}/default"}}') as api:
        receiver.replies += ok(3)
        api.fake.script = [fake.tool_calls(("get_location", {}, "c1")), fake.text("Paris"),
                           fake.hanging("and on")]
        run = await api.create(input="where?", tools=[], client_tools=[LOCATION])
        await until(lambda: receiver.requests)
        assert verified(receiver.requests[0])["type"] == "run.requires_action"
        assert receiver.requests[0].path == "/default"
        resp = await api.client.post(f"/runs/{run['id']}/tool_results",
                                     json={"tool_call_id": "c1", "content": "Paris"})
        assert resp.status_code in (200, 202), resp.text
        await until(lambda: len(receiver.requests) == 2)
        assert verified(receiver.requests[1])["data"]["status"] == "completed"
        cancelled = await api.create(input="x", webhook=receiver.url + "/own")
        await api.wait_status(cancelled["id"], "running")
        await api.client.post(f"/runs/{cancelled['id']}/cancel")
        await until(lambda: len(receiver.requests) == 3)
        assert receiver.requests[2].path == "/own"
        assert verified(receiver.requests[2])["data"] == {
            "run_id": cancelled["id"], "thread_id": None, "status": "cancelled",
            "stop_reason": "aborted"}


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://example.com/h", "http or https"), ("not a url", "http or https"),
    ("http://10.1.2.3/h", "10.1.2.3"), ("http://169.254.169.254/latest", "169.254.169.254")])
async def test_bad_webhooks_are_422_naming_the_field(url: str, why: str) -> None:
    async with WireServer() as receiver, hooked(receiver, worker=False) as api:
        resp = await api.client.post("/runs", json={"input": "hi", "webhook": url})
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["field"] == "webhook" and why in resp.text


async def test_webhooks_are_off_without_a_secret() -> None:
    async with serve(worker=False) as api:
        resp = await api.client.post("/runs", json={"input": "hi", "webhook": "http://a.b/"})
        assert resp.status_code == 422 and "AGENTLOOP_WEBHOOK_SECRET" in resp.text


async def test_a_name_resolving_to_loopback_is_refused_at_delivery() -> None:
    async with WireServer() as receiver, hooked(receiver) as api:
        api.fake.script = [fake.text("done")]
        run = await api.create(input="hi", webhook=f"http://localhost:{receiver.port}/h")
        (delivery,) = await _settled(api, run["id"])
        assert delivery["state"] == "failed" and len(delivery["attempts"]) == 1
        assert "refused" in delivery["attempts"][0]["error"]
        assert receiver.requests == []


async def test_the_outbox_outlives_a_restart_on_redis(redis_url: str) -> None:
    async with WireServer() as receiver:
        receiver.replies += [failing() for _ in range(50)]
        async with hooked(receiver, redis_backend(redis_url), webhook_retry_seconds=0.2,
                          webhook_retry_cap=0.2) as api:
            api.fake.script = [fake.text("done")]
            run = await api.create(input="hi", webhook=receiver.url + "/h")
            await until(lambda: receiver.requests)  # the first attempt failed
        tried = len(receiver.requests)
        receiver.replies[:] = ok()
        async with hooked(receiver, redis_backend(redis_url)) as again:
            (delivery,) = await _settled(again, run["id"])
        assert delivery["state"] == "delivered"
        assert [a["status"] for a in delivery["attempts"]][-1] == 204
        assert len(delivery["attempts"]) == tried + 1
        assert verified(receiver.requests[-1])["data"]["run_id"] == run["id"]


async def test_an_agent_names_the_webhook_of_its_runs() -> None:
    async with WireServer() as receiver, hooked(receiver) as api:
        receiver.replies += ok()
        resp = await api.client.post("/agents", json={
            "name": "hooked", "model": "fake:test", "webhook": receiver.url + "/agent"})
        assert resp.status_code == 201, resp.text
        api.fake.script = [fake.text("done")]
        run = await api.create(input="hi", agent="hooked")
        await until(lambda: receiver.requests)
        assert receiver.requests[0].path == "/agent"
        assert verified(receiver.requests[0])["data"]["run_id"] == run["id"]
        bad = await api.client.post("/agents", json={"name": "bad", "webhook": "http://10.0.0.9/"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "webhook"
