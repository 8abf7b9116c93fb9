"""The real ``@ag-ui/client`` (``HttpAgent``, pinned by package-lock.json) against ``/ag-ui``.

``ag_ui_run.mjs`` runs the agent with the client's own transport, its event verifier (which
fails the run on any event out of order or left open) and its message reducer, on both
backends. The reconnect stream is checked with the Python ``ag-ui-protocol`` event models.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from providers import fake
from providers.messages import AssistantMessage, ToolResultMessage, UserMessage
from tests.api.conftest import Api
from tests.js.node_client import run_node
from tests.js.test_ai_sdk import GATE

# several Node processes per test, on a machine shared with other suites (load 10-16 measured)
pytestmark = pytest.mark.timeout(180)

EVENT = TypeAdapter(Event)


def user(text: str, id_: str = "u1") -> dict[str, Any]:
    return {"id": id_, "role": "user", "content": text}


async def run_agent(api: Api, thread: str, messages: list[dict[str, Any]],
                    **spec: Any) -> dict[str, Any]:
    return await run_node("ag_ui_run.mjs", {"url": api.url + "/ag-ui", "threadId": thread,
                                            "messages": messages, **spec},
                          package="@ag-ui/client")


def types(out: dict[str, Any]) -> list[str]:
    return [e["type"] for e in out["events"]]


async def test_a_tool_round_trip_and_the_final_messages(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_weather", {"city": "Paris"}), arg_chunks=3),
                       fake.text("It is sunny in Paris.", chunks=3)]
    out = await run_agent(api, "thread-1", [user("Weather in Paris?")],
                          forwardedProps={"agentloop": {"tools": ["aisdk_weather"]}})
    assert out["error"] is None
    assert types(out) == [
        "RUN_STARTED", "STEP_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT", "STEP_FINISHED", "STEP_STARTED",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED"]
    messages = out["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    call = messages[1]["toolCalls"][0]
    assert call["function"] == {"name": "aisdk_weather", "arguments": '{"city": "Paris"}'}
    assert messages[2] | {"id": None} == {"id": None, "role": "tool", "toolCallId": call["id"],
                                          "content": "sunny in Paris"}
    assert messages[3]["content"] == "It is sunny in Paris."
    assert out["result"] == "It is sunny in Paris."
    run_id = out["events"][0]["runId"]
    run = await api.get(run_id)
    assert run["metadata"]["chat_id"] == "thread-1" and run["status"] == "completed"


async def test_the_conversation_continues_from_the_messages(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_weather", {"city": "Oslo"})), fake.text("Snow."),
                       fake.text("Still snow.")]
    props = {"agentloop": {"tools": ["aisdk_weather"]}}
    first = await run_agent(api, "thread-2", [user("Oslo?")], forwardedProps=props)
    second = await run_agent(api, "thread-2", [*first["messages"], user("And now?", "u2")],
                             forwardedProps=props)
    assert second["result"] == "Still snow."
    sent = api.fake.requests[2].messages
    assert [type(m) for m in sent] == [UserMessage, AssistantMessage, ToolResultMessage,
                                       AssistantMessage, UserMessage]


async def test_the_thread_id_is_a_thread_so_the_new_message_alone_continues_it(
        api: Api) -> None:
    api.fake.script = [fake.text("Hello Ada."), fake.text("Your name is Ada.")]
    await run_agent(api, "thread-only-new", [user("I am Ada")])
    second = await run_agent(api, "thread-only-new", [user("Who am I?", "u2")])
    assert second["result"] == "Your name is Ada."
    sent = api.fake.requests[1].messages
    assert [type(m) for m in sent] == [UserMessage, AssistantMessage, UserMessage]


async def test_an_error_run_ends_with_run_error(api: Api) -> None:
    api.fake.script = [fake.error("the model exploded")]
    out = await run_agent(api, "thread-err", [user("hi")])
    assert types(out)[-1] == "RUN_ERROR"
    assert "the model exploded" in out["events"][-1]["message"]


async def test_a_nested_run_is_a_subagent(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_delegate", {"task": "inner"})),
                       fake.text("inner answer"), fake.text("outer answer")]
    out = await run_agent(api, "thread-nested", [user("go")],
                          forwardedProps={"agentloop": {"tools": ["aisdk_delegate"]}})
    assert out["error"] is None and out["result"] == "outer answer"
    events = out["events"]
    started = next(e for e in events if e["type"] == "SUBAGENT_STARTED")
    call = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert started["name"] == "aisdk_delegate" and started["parentToolCallId"] == call["toolCallId"]
    sub = started["subagentRunId"]
    inner = [e for e in events if e.get("subagentRunId") == sub and e["type"] != "SUBAGENT_STARTED"]
    assert [e["type"] for e in inner] == [
        "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "STEP_FINISHED", "SUBAGENT_FINISHED"]
    assert inner[-1]["result"] == "inner answer"
    nested = [m for m in out["messages"] if m.get("subagentRunId") == sub]
    assert [m["content"] for m in nested] == ["inner answer"]


async def test_abort_leaves_the_run_running_unless_asked_to_cancel(api: Api) -> None:
    api.fake.script, api.fake.repeat = [fake.hanging("thinking...")], True
    kept = await run_agent(api, "thread-abort", [user("go")], abortAfter=3)
    run_id = kept["events"][0]["runId"]
    assert (await api.get(run_id))["status"] == "running"
    await api.client.post(f"/runs/{run_id}/cancel")
    await api.wait_status(run_id, "cancelled")

    cut = await run_agent(api, "thread-abort-2", [user("go")], abortAfter=3,
                          forwardedProps={"agentloop": {"cancel_on_disconnect": True}})
    await api.wait_status(cut["events"][0]["runId"], "cancelled", within=20)


async def test_a_frontend_tool_ends_the_run_and_the_next_input_answers_it(api: Api) -> None:
    tool = {"name": "confirm", "description": "Ask the user",
            "parameters": {"type": "object", "properties": {"question": {"type": "string"}}}}
    api.fake.script = [fake.tool_calls(("confirm", {"question": "ok?"})), fake.text("Confirmed.")]
    first = await run_agent(api, "thread-tools", [user("go")], tools=[tool])
    assert first["error"] is None and types(first)[-1] == "RUN_FINISHED"
    assert "TOOL_CALL_RESULT" not in types(first)
    call = first["messages"][-1]["toolCalls"][0]
    assert call["function"]["name"] == "confirm"
    run_id = first["events"][0]["runId"]
    assert (await api.wait_status(run_id, "requires_action"))["pending"][0]["kind"] == \
        "client_tool"
    # the client ran the tool: its result is the next input's last message
    answer = {"id": "t1", "role": "tool", "toolCallId": call["id"], "content": "yes"}
    second = await run_agent(api, "thread-tools", [*first["messages"], answer], tools=[tool])
    assert second["error"] is None and second["result"] == "Confirmed."
    assert second["events"][0]["runId"] == run_id  # the same run goes on
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool", "assistant"]
    sent = api.fake.requests[1].messages[-1]
    assert isinstance(sent, ToolResultMessage) and sent.content[0].text == "yes"  # type: ignore[union-attr]
    again = await run_agent(api, "thread-tools", [*first["messages"], answer], tools=[tool])
    assert "HTTP 409" in again["error"]  # nothing waits any more


async def test_bad_inputs_name_the_field(api: Api) -> None:
    async def post(body: dict[str, Any]) -> httpx.Response:
        return await api.client.post("/ag-ui", json=body)

    base = {"threadId": "t", "runId": "r", "messages": [user("hi")]}
    assert (await post({**base, "threadId": "a/b"})).json()["error"]["field"] == "threadId"
    assistant_last = await post({**base, "messages": [
        user("hi"), {"id": "a", "role": "assistant", "content": "x"}]})
    assert assistant_last.status_code == 422
    assert assistant_last.json()["error"]["field"] == "messages[1].role"
    props = await post({**base, "forwardedProps": {"agentloop": {"modle": "x"}}})
    assert props.json()["error"]["field"] == "forwardedProps.agentloop.modle"
    missing = await post({"threadId": "t"})
    assert missing.status_code == 422


async def test_a_reconnect_replays_the_active_run_after_a_snapshot(api: Api) -> None:
    GATE.clear()
    api.fake.script = [fake.tool_calls(("aisdk_gate", {})), fake.text("done waiting")]
    body = {"threadId": "thread-re", "runId": "r1", "messages": [user("wait")],
            "forwardedProps": {"agentloop": {"tools": ["aisdk_gate"]}}}
    async with api.client.stream("POST", "/ag-ui", json=body) as resp:
        async for line in resp.aiter_lines():
            if "TOOL_CALL_END" in line:
                break  # the page reloads while the tool runs
    events: list[Any] = []
    async with api.client.stream("GET", "/ag-ui/threads/thread-re/stream") as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                events.append(EVENT.validate_python(orjson.loads(line[5:])))
                threading.Thread(target=GATE.set).start()
    kinds = [e.type.value for e in events]
    assert kinds[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"] and kinds[-1] == "RUN_FINISHED"
    assert [m.role for m in events[1].messages] == ["user"]
    assert events[-1].result == "done waiting"
    done = await api.client.get("/ag-ui/threads/thread-re/stream")
    assert done.status_code == 204
