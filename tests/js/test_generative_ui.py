"""A tool's typed data (``ctx.emit_data``), the run's shared state (``ctx.update_state``,
AG-UI's agent state) and structured output, through the real `ai` package (``useChat``'s chat
engine) and the real ``@ag-ui/client`` (``HttpAgent``, whose reducer applies STATE_SNAPSHOT
and STATE_DELTA to ``agent.state``), on both backends; and in the native log."""

from __future__ import annotations

from typing import Any

import pytest

from app import runtime
from providers import fake
from tests.api.conftest import Api
from tests.js.node_client import run_node
from tests.js.test_ai_sdk_session import history, session
from tests.support.sse_client import read_all
from tool_registry import ToolContext, function

pytestmark = pytest.mark.timeout(180)
FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@function(toolsets=["genui_testing"])
async def genui_search(query: str, ctx: ToolContext) -> str:
    """Searches, showing its progress as a card (test tool)."""
    ctx.emit_data("card", {"status": "searching", "query": query}, id="c1")
    ctx.emit_data("note", "an unnamed part")
    ctx.emit_data("card", {"status": "done", "hits": 2}, id="c1")  # the same card, updated
    return "2 hits"


@function(toolsets=["genui_testing"])
async def genui_cart_add(item: str, ctx: ToolContext) -> str:
    """Adds an item to the shared cart (test tool)."""
    items = ctx.state.get("cart", [])
    ctx.update_state([{"op": "add", "path": "/cart" if not items else "/cart/-",
                       "value": [item] if not items else item}])
    return f"{item} added"


@function(toolsets=["genui_testing"])
async def genui_bad_patch(ctx: ToolContext) -> str:
    """Sends a patch that does not apply (test tool)."""
    ctx.update_state([{"op": "remove", "path": "/nothing/here"}])
    return "unreachable"


@function(toolsets=["genui_testing"])
async def genui_nested(task: str) -> str:
    """Runs a nested loop whose tool changes the run's state (test tool)."""
    out = await runtime.exec(task, tools=["genui_cart_add"])
    return out.text


async def test_tool_data_parts_update_in_place_and_survive_a_reload(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("genui_search", {"query": "tea"}, "s1")),
                       fake.text("Found two.")]
    out = await session(api, "g-data", [{"op": "send", "text": "find tea"}],
                        body={"tools": ["genui_search"]})
    assert out["errors"] == []
    parts = [p for p in out["messages"][-1]["parts"] if p["type"].startswith("data-")]
    assert parts == [{"type": "data-card", "id": "c1", "data": {"status": "done", "hits": 2}},
                     {"type": "data-note", "data": "an unnamed part"}]
    assert [d["type"] for d in out["data"]] == ["data-card", "data-note", "data-card"]
    assert await history(api, "g-data") == out["messages"]
    frames = await read_all(api.client, f"/runs/{out['messages'][-1]['id']}/events")
    data = [f.data for f in frames if f.event == "data"]
    assert [(d["name"], d.get("id"), d["tool_call_id"]) for d in data] == [
        ("card", "c1", "s1"), ("note", None, "s1"), ("card", "c1", "s1")]


async def test_structured_output_is_a_data_part_and_metadata(api: Api) -> None:
    api.fake.script = [fake.text('{"city": "Oslo"}')]
    out = await session(api, "g-output", [{"op": "send", "text": "a city"}],
                        body={"response_format": FORMAT})
    reply = out["messages"][-1]
    assert {"type": "data-output", "id": "output", "data": {"city": "Oslo"}} in reply["parts"]
    assert reply["metadata"]["output"] == {"city": "Oslo"}


async def test_output_invalid_is_an_error_in_the_chat(api: Api) -> None:
    api.fake.script = [fake.text("not json"), fake.text("still not")]
    out = await session(api, "g-invalid", [{"op": "send", "text": "a city"}],
                        body={"response_format": FORMAT})
    assert len(out["errors"]) == 1 and not out["errors"][0].startswith("{")
    assert out["messages"][-1]["metadata"]["stop_reason"] == "output_invalid"


def agui_user(text: str, id_: str) -> dict[str, Any]:
    return {"id": id_, "role": "user", "content": text}


async def agent_run(api: Api, thread: str, messages: list[dict[str, Any]],
                    **spec: Any) -> dict[str, Any]:
    return await run_node("ag_ui_run.mjs", {"url": api.url + "/ag-ui", "threadId": thread,
                                            "messages": messages, **spec},
                          package="@ag-ui/client")


async def test_ag_ui_state_from_the_client_changed_by_tools_and_kept_per_thread(
        api: Api) -> None:
    api.fake.script = [fake.tool_calls(("genui_cart_add", {"item": "tea"})),
                       fake.text("Added."), fake.tool_calls(("genui_cart_add", {"item": "jam"})),
                       fake.text("Added too.")]
    props = {"agentloop": {"tools": ["genui_cart_add"]}}
    first = await agent_run(api, "g-state", [agui_user("add tea", "m1")],
                            state={"cart": [], "user": "ada"}, forwardedProps=props)
    assert first["error"] is None
    kinds = [e["type"] for e in first["events"]]
    assert kinds.index("STATE_SNAPSHOT") < kinds.index("STATE_DELTA")
    assert first["state"] == {"cart": ["tea"], "user": "ada"}
    # a new client (no state of its own): the thread's state goes on
    second = await agent_run(api, "g-state", [agui_user("add jam", "m2")], forwardedProps=props)
    assert second["error"] is None
    snapshot = next(e for e in second["events"] if e["type"] == "STATE_SNAPSHOT")
    assert snapshot["snapshot"] == {"cart": ["tea"], "user": "ada"}
    assert second["state"] == {"cart": ["tea", "jam"], "user": "ada"}


async def test_ag_ui_data_output_and_the_clients_message_ids(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("genui_search", {"query": "tea"})), fake.text("ok"),
                       fake.text('{"city": "Rome"}')]
    out = await agent_run(api, "g-agui", [agui_user("find tea", "mine-1")],
                          forwardedProps={"agentloop": {"tools": ["genui_search"]}})
    custom = [e for e in out["events"] if e["type"] == "CUSTOM" and e["name"] == "card"]
    assert [c["value"]["data"]["status"] for c in custom] == ["searching", "done"]
    assert custom[0]["value"]["id"] == "c1"
    typed = await agent_run(api, "g-agui", [agui_user("a city", "mine-2")],
                            forwardedProps={"agentloop": {"response_format": FORMAT}})
    assert typed["error"] is None and typed["state"]["output"] == {"city": "Rome"}
    assert typed["result"] == {"city": "Rome"}
    found = (await api.client.get("/threads", params={"metadata.chat_id": "g-agui"})).json()
    thread = (await api.client.get(f"/threads/{found['threads'][0]['id']}")).json()
    users = [m for m in thread["messages"] if m["role"] == "user"]
    assert [m.get("id") for m in users] == ["mine-1", "mine-2"]  # the client's own ids


async def test_state_changes_of_a_nested_loop_and_a_patch_that_does_not_apply(
        api: Api) -> None:
    api.fake.script = [fake.tool_calls(("genui_nested", {"task": "add tea"}, "n1")),
                       fake.tool_calls(("genui_cart_add", {"item": "tea"})), fake.text("in"),
                       fake.tool_calls(("genui_bad_patch", {}, "b1")), fake.text("done")]
    run = await api.create(input="go", tools=["genui_nested", "genui_bad_patch"],
                           state={"cart": []})
    frames = await read_all(api.client, run["events_url"])
    states = [f.data for f in frames if f.event in ("state_snapshot", "state_delta")]
    assert [s["type"] for s in states] == ["state_snapshot", "state_delta"]
    assert states[1]["depth"] == 0 and states[1]["delta"][0]["value"] == ["tea"]
    bad = next(f.data for f in frames if f.event == "tool_execution_end"
               and f.data["tool_call_id"] == "b1")
    assert bad["is_error"] and "does not exist" in bad["result"]["content"][0]["text"]
