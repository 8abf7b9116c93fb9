"""Usage accounting: tokens of ended runs per tenant, subject, agent, model and day, in
``GET /usage`` and ``agentloop_tokens_total`` (issue 32)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from providers import fake
from providers.messages import Usage
from tests.api.conftest import Api


async def usage(api: Api, expect: int = 200, **params: Any) -> Any:
    resp = await api.client.get("/usage", params=params)
    assert resp.status_code == expect, resp.text
    return resp.json()


async def until_runs(api: Api, n: int, within: float = 10.0) -> list[dict[str, Any]]:
    """The day's rows once ``n`` runs are counted (the count follows the run's end)."""
    deadline = time.monotonic() + within
    while True:
        rows = (await usage(api, group_by="day"))["usage"]
        if rows and rows[-1]["runs"] >= n:
            return rows
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.02)


async def test_usage_by_model_day_and_agent_and_its_checks(ops: Api) -> None:
    ops.fake.script = [fake.text("a"), fake.text("b", usage=Usage(input_tokens=100,
                                                                  output_tokens=1,
                                                                  cache_read_tokens=40))]
    for _ in range(2):
        run = await ops.create(input="hi", model="fake:small")
        await ops.wait_status(run["id"], "completed")
    today = datetime.now(UTC).date()
    rows = await until_runs(ops, 2)
    assert rows == [{"key": today.isoformat(), "runs": 2, "input_tokens": 110,
                     "output_tokens": 6, "cached_tokens": 40}]
    by_model = (await usage(ops, group_by="model"))["usage"]
    assert [(r["key"], r["runs"], r["input_tokens"]) for r in by_model] == [
        ("fake:small", 2, 110)]
    assert [r["key"] for r in (await usage(ops, group_by="agent"))["usage"]] == [None]
    assert (await usage(ops, group_by="subject"))["usage"][0]["key"] is None
    yesterday = (today - timedelta(days=1)).isoformat()
    assert (await usage(ops, group_by="day", to=yesterday))["usage"] == []
    for params, field in (({"group_by": "tenant"}, "group_by"),
                          ({"from": "2026-13-01"}, "from"), ({"to": "tomorrow"}, "to"),
                          ({"from": today.isoformat(), "to": yesterday}, "from"),
                          ({"from": "2000-01-01"}, "from")):
        error = (await usage(ops, 422, **params))["error"]
        assert error["field"] == field, (params, error)
    other = await ops.client.get("/usage", headers={"Authorization": "Bearer key-k"})
    assert other.json() == {"usage": []}  # another tenant's usage is its own
    metrics = (await ops.client.get("/metrics")).text
    assert 'agentloop_tokens_total{kind="cache_read",model="small",provider="fake"}' in metrics


async def test_usage_lists_a_model_whose_name_holds_any_character(ops: Api) -> None:
    """A model name (or an end user's subject) is the caller's string: one holding the Redis
    usage field's separator made ``GET /usage`` a 500 for the tenant's whole day."""
    ops.fake.script = [fake.text("a"), fake.text("b")]
    for model in ("fake:odd\x1fname", "fake:plain"):
        run = await ops.create(input="hi", model=model)
        await ops.wait_status(run["id"], "completed")
    await until_runs(ops, 2)
    by_model = (await usage(ops, group_by="model"))["usage"]
    assert sorted((r["key"], r["runs"]) for r in by_model) == [
        ("fake:odd\x1fname", 1), ("fake:plain", 1)]
    assert (await usage(ops, group_by="day"))["usage"][0]["runs"] == 2


async def test_end_users_may_not_read_usage(ops: Api) -> None:
    resp = await ops.client.post("/client_tokens", json={"subject": "u1"})
    assert resp.status_code == 201, resp.text
    token = resp.json()["token"]
    resp = await ops.client.get("/usage", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 403, resp.text
