"""Quotas at every door (``AGENTLOOP_TENANT_LIMITS``): 429 ``quota_exceeded`` naming the limit
with ``Retry-After``, slots given back however a run ends, exact under concurrent requests on
two servers sharing one Redis (issue 32)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api import quotas
from providers import fake
from tests.api.conftest import Api, serve
from tests.api.test_one_pipeline import post
from tests.ops.conftest import KEYS, limits, redis_backend
from tests.support.live_server import client_limits
from tests.support.redis_server import free_port
from tests.support.serve_process import start_serve, until_up


def refused(resp: httpx.Response, limit: str) -> None:
    assert resp.status_code == 429, resp.text
    assert int(resp.headers["Retry-After"]) >= 1
    if resp.headers.get("content-type", "").startswith("application/json"):
        error = resp.json()["error"]
        assert (error["code"], error["field"]) == ("quota_exceeded", limit)
        assert limit in error["message"]
    else:  # the AI SDK door answers errors in plain text
        assert limit in resp.text


async def test_active_runs_are_limited_at_every_door_until_one_ends(ops: Api) -> None:
    ops.fake.script = [fake.hanging("a"), fake.hanging("b"), fake.hanging("c")]
    first = await ops.create(input="one")
    await ops.create(input="two")
    for door in ("runs", "thread", "ai_sdk", "ag_ui"):
        refused(await post(ops, door, f"chat-{door}"), "max_active_runs")
    async def active() -> set[str]:
        return {r for r, _ in await ops.call(ops.backend.active_runs("t", None))}

    assert first["id"] in await active()
    await ops.client.post(f"/runs/{first['id']}/cancel")
    await ops.wait_status(first["id"], "cancelled")
    async with asyncio.timeout(30):  # given back by its worker, not found by the next request
        while first["id"] in await active():
            await asyncio.sleep(0.02)
    third = await ops.create(input="three")  # the cancelled run's slot was given back
    refused(await post(ops, "runs", "x"), "max_active_runs")
    assert third["status"] in ("queued", "running")


async def test_runs_per_minute_say_when_to_retry(ops: Api) -> None:
    ops.fake.script = [fake.text(str(n)) for n in range(3)]
    headers = {"Authorization": "Bearer key-k"}
    for _ in range(3):
        resp = await ops.client.post("/runs", json={"input": "hi"}, headers=headers)
        assert resp.status_code == 201, resp.text
    resp = await ops.client.post("/runs", json={"input": "hi"}, headers=headers)
    refused(resp, "runs_per_minute")
    assert 50 <= int(resp.headers["Retry-After"]) <= 60


async def test_a_deleted_thread_gives_its_run_slot_back(ops: Api) -> None:
    ops.fake.script = [fake.hanging("a"), fake.hanging("b"), fake.hanging("c")]
    thread = (await ops.client.post("/threads", json={})).json()["id"]
    resp = await ops.client.post(f"/threads/{thread}/runs", json={"input": "one"})
    assert resp.status_code == 201, resp.text
    await ops.create(input="two")
    refused(await post(ops, "runs", "x"), "max_active_runs")
    assert (await ops.client.delete(f"/threads/{thread}")).status_code == 204
    await ops.wait_status(resp.json()["id"], "cancelled")
    await ops.create(input="three")


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_a_run_gone_from_the_store_is_dropped_from_a_full_set(
        kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that ended without its worker (a thread's waiting run, a record past its
    retention) leaves the active set the next time the set is found full."""
    monkeypatch.setattr(quotas, "GRACE", 0.0)
    backend = redis_backend(request.getfixturevalue("redis_url")) if kind == "redis" else None
    async with serve(backend=backend, worker=False, api_key="key-t", api_keys=KEYS,
                     tenant_limits=limits()) as api:
        gone = await api.create(input="one")
        await api.create(input="two")
        refused(await post(api, "runs", "x"), "max_active_runs")
        await api.call(_forget(api.backend, gone["id"]))
        await api.create(input="three")
        refused(await post(api, "runs", "x"), "max_active_runs")


async def _forget(backend: Any, run_id: str) -> None:
    if hasattr(backend, "_runs"):
        backend._runs.pop(run_id)
    else:
        from app.store.redis import keys

        await backend.client.delete(keys.run_key(run_id))


async def test_a_spent_run_budget_ends_it_with_stop_reason_budget(ops: Api) -> None:
    ops.fake.script = [fake.tool_calls(("no_such_tool", {})), fake.text("never")]
    run = await ops.create(input="go", max_total_tokens=10)
    done = await ops.wait_status(run["id"], "completed")
    assert done["stop_reason"] == "budget" and len(ops.fake.requests) == 1
    resp = await ops.client.post("/runs", json={"input": "hi", "max_total_tokens": 0})
    assert resp.status_code == 422 and resp.json()["error"]["field"] == "max_total_tokens"


async def test_two_api_processes_on_one_redis_admit_exactly_the_limit(
        redis_url: str, tmp_path: Path) -> None:
    """200 concurrent POSTs, half to each of two ``agentloop serve`` processes (no worker: no
    run ends meanwhile), admit exactly the limit; so does a minute's window."""
    table = limits({"t": {"max_active_runs": 40}, "k": {"runs_per_minute": 25}})
    ports = [free_port(), free_port()]
    procs = [await start_serve(port, tmp_path, args=("--no-worker",),
                               AGENTLOOP_REDIS_URL=redis_url, AGENTLOOP_API_KEYS=KEYS,
                               AGENTLOOP_TENANT_LIMITS=table,
                               AGENTLOOP_DEFAULT_MODEL="demo:echo") for port in ports]
    clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=client_limits(),
                                 timeout=httpx.Timeout(30.0)) for port in ports]
    try:
        await asyncio.gather(*(until_up(c, p) for c, p in zip(clients, procs, strict=True)))

        async def burst(key: str, n: int) -> list[int]:
            async def one(i: int) -> int:
                resp = await clients[i % 2].post("/runs", json={"input": "hi"},
                                                 headers={"Authorization": f"Bearer {key}"})
                return resp.status_code

            return list(await asyncio.gather(*(one(i) for i in range(n))))

        codes = await burst("key-t", 200)
        assert (codes.count(201), codes.count(429)) == (40, 160)
        codes = await burst("key-k", 100)
        assert (codes.count(201), codes.count(429)) == (25, 75)
    finally:
        for client in clients:
            await client.aclose()
        for proc in procs:
            proc.terminate()
        await asyncio.gather(*(p.wait() for p in procs))


async def test_bad_limits_do_not_start_the_service() -> None:
    with pytest.raises(ValueError, match="AGENTLOOP_TENANT_LIMITS"):
        async with serve(tenant_limits='{"t": {"max_active_runs": -1}}'):
            pass  # pragma: no cover
    with pytest.raises(ValueError, match="AGENTLOOP_TENANT_LIMITS"):
        async with serve(tenant_limits='{"t": {"max_runs": 1}}'):
            pass  # pragma: no cover




async def test_each_end_user_has_its_own_limits(tmp_path: Path) -> None:
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents:\n  - name: helper\n    model: fake:test\n")
    table = limits({"t": {"max_active_runs": 3, "per_subject": {"max_active_runs": 1}}})
    async with serve(worker=False, api_key="key-t", api_keys=KEYS, agents_file=agents,
                     tenant_limits=table) as api:
        async def as_user(subject: str) -> httpx.Response:
            token = (await api.client.post("/client_tokens", json={"subject": subject})).json()
            return await api.client.post("/runs", json={"input": "hi", "agent": "helper"}, headers={
                "Authorization": f"Bearer {token['token']}"})

        assert (await as_user("u1")).status_code == 201
        again = await as_user("u1")
        refused(again, "max_active_runs")
        assert "this user" in again.json()["error"]["message"]
        assert (await as_user("u2")).status_code == 201
        await api.create(input="the tenant's own key: no user limit")
        refused(await as_user("u3"), "max_active_runs")  # the tenant's 3 are taken
        assert "tenant t" in (await as_user("u3")).json()["error"]["message"]
