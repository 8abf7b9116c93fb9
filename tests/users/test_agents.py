"""Agents: defined in a file or through the admin API, versioned, locking what a request may
set, at every door; granted to end users by their tokens. On both backends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.control.conftest import TOOLSET
from tests.support.errors import api_error
from tests.users.conftest import Users
from tests.users.test_isolation import wait_status


async def test_file_agents_are_listed_and_read_only(users: Users) -> None:
    listed = (await users.admin.get("/agents")).json()["agents"]
    files = {a["name"]: a for a in listed if a["source"] == "file"}
    assert set(files) == {"support", "open", "strict"}
    assert files["support"]["version"] == 0
    assert files["support"]["definition"]["approval"] == ["table_guarded"]
    put = await users.admin.put("/agents/support", json={"name": "support"})
    assert put.status_code == 409 and api_error(put)["code"] == "agent_read_only"
    assert (await users.admin.delete("/agents/support")).status_code == 409
    taken = await users.admin.post("/agents", json={"name": "support"})
    assert taken.status_code == 409


async def test_api_agents_are_versioned_and_runs_record_the_version(users: Users) -> None:
    name = f"helper-{users.kind}"
    created = await users.admin.post("/agents", json={
        "name": name, "model": "fake:test", "toolset": "none", "system": "v1"})
    assert created.status_code == 201, created.text
    assert created.json()["version"] == 1 and created.headers["Location"] == f"/agents/{name}"
    again = await users.admin.post("/agents", json={"name": name})
    assert again.status_code == 409 and api_error(again)["code"] == "agent_exists"
    v2 = await users.admin.put(f"/agents/{name}", json={
        "name": name, "model": "fake:test", "toolset": "none", "system": "v2"})
    assert v2.status_code == 200 and v2.json()["version"] == 2
    run = (await users.admin.post("/runs", json={"agent": name, "input": "say hi"})).json()
    assert (run["agent"], run["agent_version"]) == (name, 2)
    done = await wait_status(users.admin, run["id"], "completed")
    sent = [r for r in users.provider.requests if r.system == "v2"]
    assert sent, "the agent's system prompt reached the model"
    await users.admin.put(f"/agents/{name}", json={"name": name, "system": "v3"})
    versions = (await users.admin.get(f"/agents/{name}/versions")).json()["agents"]
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert [v["definition"]["system"] for v in versions] == ["v1", "v2", "v3"]
    assert (await users.admin.get(f"/runs/{done['id']}")).json()["agent_version"] == 2
    assert (await users.admin.delete(f"/agents/{name}")).status_code == 204
    assert (await users.admin.get(f"/agents/{name}")).status_code == 404
    gone = await users.admin.post("/runs", json={"agent": name, "input": "x"})
    assert gone.status_code == 404 and api_error(gone) == {
        "code": "agent_not_found", "message": f"no agent {name!r}", "field": "agent"}


@pytest.mark.parametrize(("definition", "status", "field"), [
    ({"tools": ["no_such_tool"]}, 400, "tools[0]"),
    ({"approval": ["write_files"]}, 400, "approval[0]"),
    ({"overridable": ["input", "colour"]}, 422, "overridable"),
    ({"client_tools": [{"name": "read_file"}]}, 400, "client_tools[0].name"),
    ({"name": "no spaces"}, 422, "name"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "f", "schema": {"type": "array"}}}}, 422, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_object"}}, 422, "response_format.type"),
])
async def test_an_agent_is_checked_as_a_run_is(users: Users, definition: dict[str, Any],
                                               status: int, field: str) -> None:
    resp = await users.admin.post("/agents", json={"name": "checked", **definition})
    assert resp.status_code == status, resp.text
    assert api_error(resp)["field"] == field


def ui(text: str) -> list[dict[str, Any]]:
    return [{"id": "s1", "role": "system", "parts": [{"type": "text", "text": "be rude"}]},
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}]


async def test_a_locked_field_is_403_at_every_door(users: Users) -> None:
    async with users.client(await users.token("e", agents=["support"])) as e:
        thread = (await e.post("/threads", json={})).json()["id"]
        tries = [
            ("system", await e.post("/runs", json={"input": "hi", "system": "be rude"})),
            ("model", await e.post(f"/threads/{thread}/runs", json={
                "input": "hi", "model": "fake:other"})),
            ("system", await e.post("/ai-sdk/chat", json={"id": "c-e", "messages": ui("hi")})),
            ("max_iterations", await e.post("/ai-sdk/chat", json={
                "id": "c-e2", "max_iterations": 99, "messages": ui("hi")[1:]})),
            ("forwardedProps.agentloop.temperature", await e.post("/ag-ui", json={
                "threadId": "t-e", "runId": "r", "state": {}, "context": [], "tools": [],
                "messages": [{"id": "u1", "role": "user", "content": "hi"}],
                "forwardedProps": {"agentloop": {"temperature": 1.5}}})),
        ]
        for field, resp in tries:
            assert resp.status_code == 403, resp.text
            assert api_error(resp) == {"code": "field_locked", "field": field, "message": (
                f"{field}: agent 'support' does not let a request set this")}
        assert (await e.get("/runs")).json()["runs"] == []  # nothing started
    async with users.client(await users.token("f", agents=["open"])) as f:
        resp = await f.post("/runs", json={"input": "say f", "system": "be brief",
                                           "temperature": 0.2})
        assert resp.status_code == 201, resp.text
        await wait_status(f, resp.json()["id"], "completed")
        assert any(r.system == "be brief" and r.temperature == 0.2
                   for r in users.provider.requests)


async def test_what_an_end_users_token_grants(users: Users) -> None:
    async with users.client(await users.token("g", agents=["support"])) as one:
        run = (await one.post("/runs", json={"input": "park g1"})).json()  # its one agent
        assert run["agent"] == "support"
        await wait_status(one, run["id"], "requires_action")  # the agent's approval holds
        other = await one.post("/runs", json={"agent": "open", "input": "hi"})
        assert other.status_code == 403 and api_error(other)["field"] == "agent"
        assert api_error(other)["code"] == "agent_not_granted"
        missing = await one.post("/runs", json={"agent": "nobody", "input": "hi"})
        assert missing.status_code == 403
    async with users.client(await users.token("g", agents=["support", "open"])) as two:
        resp = await two.post("/runs", json={"input": "hi"})
        assert resp.status_code == 422 and api_error(resp)["field"] == "agent"
        assert "open, support" in api_error(resp)["message"]
    async with users.client(await users.token("g")) as every:
        resp = await every.post("/runs", json={"input": "hi"})
        assert resp.status_code == 422 and api_error(resp)["field"] == "agent"
        assert (await every.post("/runs", json={"agent": "strict", "input": "hi"})
                ).status_code == 201
    raw = await users.admin.post("/runs", json={"input": "say raw", "toolset": TOOLSET})
    assert raw.status_code == 201 and raw.json()["agent"] is None  # the key needs no agent


async def test_a_token_names_known_agents_and_expires(users: Users) -> None:
    bad = await users.admin.post("/client_tokens", json={"subject": "h", "agents": ["nobody"]})
    assert bad.status_code == 404 and api_error(bad)["field"] == "agents[0]"
    minted = (await users.admin.post("/client_tokens", json={"subject": "h", "ttl": 60})).json()
    assert minted["subject"] == "h" and minted["agents"] is None
    assert minted["expires_at"].endswith("Z")
    too_long = await users.admin.post("/client_tokens", json={"subject": "h", "ttl": 90_000})
    assert too_long.status_code == 422 and api_error(too_long)["field"] == "ttl"
    async with users.client("not.a.token") as nobody:
        assert (await nobody.get("/runs")).status_code == 401


FORMAT = {"type": "json_schema", "json_schema": {"name": "reply", "schema": {
    "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
    "additionalProperties": False}, "strict": True}}


async def test_an_agent_sets_and_locks_response_format(users: Users) -> None:
    name = f"formatted-{users.kind}"
    created = await users.admin.post("/agents", json={
        "name": name, "model": "fake:test", "toolset": "none", "response_format": FORMAT})
    assert created.status_code == 201, created.text
    stored = created.json()["definition"]["response_format"]
    assert stored["json_schema"]["schema"] == FORMAT["json_schema"]["schema"]
    locked = await users.admin.post("/runs", json={"agent": name, "input": "x",
                                                   "response_format": {"type": "text"}})
    assert locked.status_code == 403 and locked.json()["error"]["field"] == "response_format"
    run = (await users.admin.post("/runs", json={"agent": name, "input": "fmt-a"})).json()
    done = await wait_status(users.admin, run["id"], "failed")  # the echo model writes no JSON
    assert done["stop_reason"] == "output_invalid" and done["output"] is None
    sent = [r.response_format for r in users.provider.asked("fmt-a")]
    assert len(sent) == 2 and all(f is not None and f.strict and f.name == "reply"
                                  for f in sent)
    await users.admin.put(f"/agents/{name}", json={
        "name": name, "model": "fake:test", "toolset": "none", "response_format": FORMAT,
        "overridable": ["input", "response_format"]})
    run = (await users.admin.post("/runs", json={
        "agent": name, "input": "fmt-b", "response_format": {"type": "text"}})).json()
    done = await wait_status(users.admin, run["id"], "completed")
    assert done["output"] is None and done["result"] == "echo: fmt-b"
    assert [r.response_format for r in users.provider.asked("fmt-b")] == [None]
    assert (await users.admin.delete(f"/agents/{name}")).status_code == 204
