"""Create, get, list (pagination, filters), idempotency — no worker, so runs stay queued."""

from __future__ import annotations

import re

from tests.api.conftest import Api

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
RUN_KEYS = {"id", "status", "model", "created_at", "started_at", "ended_at", "stop_reason",
            "error", "result", "output", "usage", "messages", "metadata", "queue", "events_url",
            "stream_token", "thread_id", "multitask", "pending", "agent", "agent_version"}


async def test_create_returns_201_location_and_the_run_object(api_no_worker: Api) -> None:
    resp = await api_no_worker.client.post("/runs", json={"input": "hello",
                                                          "metadata": {"team": "a"}})
    assert resp.status_code == 201
    run = resp.json()
    assert set(run) == RUN_KEYS
    assert resp.headers["location"] == f"/runs/{run['id']}"
    assert run["status"] == "queued" and run["model"] == "fake:test"
    assert RFC3339.match(run["created_at"]) and run["started_at"] is None
    assert run["queue"] == {"steer": 0, "follow_up": 0}
    assert run["events_url"] == f"/runs/{run['id']}/events"
    assert run["usage"] == {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
                            "cache_write_tokens": 0, "total_tokens": 0}
    assert run["metadata"] == {"team": "a"}
    got = await api_no_worker.get(run["id"])
    assert set(got) == RUN_KEYS
    assert got["id"] == run["id"]


async def test_list_input_is_kept_in_messages(api_no_worker: Api) -> None:
    history = [{"role": "user", "content": "a"},
               {"role": "assistant", "content": [{"type": "text", "text": "b"}]},
               {"role": "user", "content": "c"}]
    run = await api_no_worker.create(input=history, model="fake:other")
    assert [m["role"] for m in run["messages"]] == ["user", "assistant", "user"]
    assert run["model"] == "fake:other"


async def test_idempotency_key(api_no_worker: Api) -> None:
    c = api_no_worker.client
    first = await c.post("/runs", json={"input": "x"}, headers={"Idempotency-Key": "k1"})
    again = await c.post("/runs", json={"input": "x"}, headers={"Idempotency-Key": "k1"})
    other = await c.post("/runs", json={"input": "y"}, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    fresh = await c.post("/runs", json={"input": "x"}, headers={"Idempotency-Key": "k2"})
    assert fresh.status_code == 201 and fresh.json()["id"] != first.json()["id"]


async def test_list_newest_first_with_cursor_pagination(api_no_worker: Api) -> None:
    ids = [(await api_no_worker.create(input=f"n{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await api_no_worker.client.get("/runs", params=params)).json()
        assert len(page["runs"]) <= 2
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


async def test_list_filters_by_status_and_metadata(api_no_worker: Api) -> None:
    a = await api_no_worker.create(metadata={"team": "a", "env": "prod"})
    b = await api_no_worker.create(metadata={"team": "b"})
    c = api_no_worker.client
    got = (await c.get("/runs", params={"metadata.team": "a"})).json()["runs"]
    assert [r["id"] for r in got] == [a["id"]]
    got = (await c.get("/runs", params={"metadata.team": "b", "status": "queued"})).json()
    assert [r["id"] for r in got["runs"]] == [b["id"]]
    got = (await c.get("/runs", params={"status": "completed"})).json()["runs"]
    assert got == []
