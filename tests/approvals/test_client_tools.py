"""Frontend-executed tools: declared with the run, picked like any tool, answered over HTTP."""

from __future__ import annotations

from typing import Any

from providers import fake
from tests.api.conftest import Api
from tests.approvals.helpers import Watch, decide, parked, results_sent

LOCATION = {"name": "get_location", "description": "Where the user is",
            "parameters": {"type": "object", "properties": {"precise": {"type": "boolean"}},
                           "required": ["precise"]}}


async def post_result(api: Api, run_id: str, **body: Any) -> Any:
    return await api.client.post(f"/runs/{run_id}/tool_results", json=body)


async def test_a_client_tool_is_on_the_menu_and_its_result_goes_back(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("get_location", {"precise": True}, "c1")),
                       fake.text("you are in Paris")]
    run = await api.create(input="where am I?", tools=[], client_tools=[LOCATION])
    watch = Watch(api, run["id"])
    asked = await watch.until("client_tool_requested")
    assert asked.data["tool_name"] == "get_location" and asked.data["args"] == {"precise": True}
    waiting = await parked(api, run["id"])
    assert waiting["pending"][0]["kind"] == "client_tool"
    spec = api.fake.requests[0].tools
    assert [t.name for t in spec] == ["get_location"]
    assert spec[0].parameters == LOCATION["parameters"]
    wrong = await decide(api, run["id"], "c1")
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "wrong_kind"
    bad = await post_result(api, run["id"], tool_call_id="c1", content=[{"type": "video"}])
    assert bad.status_code == 422 and bad.json()["error"]["field"].startswith("content")
    missing = await post_result(api, run["id"], tool_call_id="c1")
    assert missing.status_code == 422
    resp = await post_result(api, run["id"], tool_call_id="c1", content="48.85,2.35")
    assert resp.status_code == 202, resp.text
    frames = await watch.done()
    decided = next(f for f in frames if f.event == "approval_decided")
    assert decided.data["decision"] == "result"
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "you are in Paris"
    assert results_sent(api.fake.requests[1]) == [("c1", False, "48.85,2.35")]
    again = await post_result(api, run["id"], tool_call_id="c1", content="x")
    assert again.status_code == 409 and again.json()["error"]["code"] == "not_waiting"


async def test_an_error_result_from_the_frontend_and_blocks(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("get_location", {"precise": False}, "c1"),
                                       ("hitl_delete", {"path": "p"}, "c2")),
                       fake.text("ok")]
    run = await api.create(input="go", toolset="hitl_testing", client_tools=[LOCATION])
    waiting = await parked(api, run["id"])
    assert [(p["tool_call_id"], p["kind"]) for p in waiting["pending"]] == [
        ("c1", "client_tool"), ("c2", "approval")]
    wrong = await post_result(api, run["id"], tool_call_id="c2", content="x")
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "wrong_kind"
    resp = await post_result(api, run["id"], tool_call_id="c1", is_error=True,
                             content=[{"type": "text", "text": "permission denied"}])
    assert resp.status_code == 202
    assert (await api.get(run["id"]))["status"] == "requires_action"
    assert (await decide(api, run["id"], "c2")).status_code == 202
    await api.wait_status(run["id"], "completed")
    assert results_sent(api.fake.requests[1]) == [("c1", True, "permission denied"),
                                                  ("c2", False, "deleted p")]


async def test_client_tools_are_checked_at_create(api: Api) -> None:
    clash = await api.create(expect=400, input="x", toolset="hitl_testing",
                             client_tools=[{"name": "hitl_echo"}])
    assert clash["error"]["field"] == "client_tools[0].name"
    twice = await api.create(expect=400, input="x", tools=[],
                             client_tools=[{"name": "a"}, {"name": "a"}])
    assert twice["error"]["field"] == "client_tools[1].name"
    shape = await api.create(expect=422, input="x", tools=[],
                             client_tools=[{"name": "a", "parameters": {"type": "string"}}])
    assert shape["error"]["field"] == "client_tools[0].parameters"
    name = await api.create(expect=422, input="x", tools=[], client_tools=[{"name": "a b"}])
    assert name["error"]["field"].startswith("client_tools")
    timeout = await api.create(expect=422, input="x", approval_timeout=0)
    assert timeout["error"]["field"] == "approval_timeout"
