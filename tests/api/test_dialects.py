"""The toolkit dialects are views of one stored run: a run started through the AI SDK endpoint
is watched at once through the native stream and through AG-UI; the dialects authenticate and
isolate tenants like every route. (The real clients' tests are in tests/js.)"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from providers import fake
from tests.api.conftest import Api, serve
from tests.support.sse_client import read_all
from tool_registry import function

# runs wait on a worker that shares the machine with other suites (load 10-16 measured)
pytestmark = pytest.mark.timeout(120)

EVENT = TypeAdapter(Event)
GATE = threading.Event()


@function(toolsets=["api_testing"])
async def dialect_gate() -> str:
    """Waits until the test opens the gate (test tool)."""
    opened = await asyncio.to_thread(GATE.wait, 30)
    return "opened" if opened else "timed out"


def chat_body(chat_id: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"id": chat_id, "messages": [{"id": "u1", "role": "user",
                                         "parts": [{"type": "text", "text": text}]}], **extra}


async def chat_run(api: Api, chat_id: str) -> str:
    """The id of the chat's run, once the POST that starts it has created it."""
    async with asyncio.timeout(60):
        while True:
            runs = (await api.client.get("/runs", params={"metadata.chat_id": chat_id})
                    ).json()["runs"]
            if runs:
                return str(runs[0]["id"])
            await asyncio.sleep(0.02)


async def sse_data(api: Api, method: str, url: str, opened: asyncio.Event | None = None,
                   **kwargs: Any) -> list[dict[str, Any]]:
    async with api.client.stream(method, url, **kwargs) as resp:
        assert resp.status_code == 200, await resp.aread()
        if opened is not None:
            opened.set()
        return [orjson.loads(line[5:]) async for line in resp.aiter_lines()
                if line.startswith("data:") and line != "data: [DONE]"]


async def test_one_run_through_three_views(api: Api) -> None:
    GATE.clear()
    api.fake.script = [fake.tool_calls(("dialect_gate", {})), fake.text("all done")]
    ai_sdk = asyncio.create_task(sse_data(api, "POST", "/ai-sdk/chat", json=chat_body(
        "shared-chat", "go", tools=["dialect_gate"])))
    run_id = await chat_run(api, "shared-chat")
    native = asyncio.create_task(read_all(api.client, f"/runs/{run_id}/events"))
    opened = asyncio.Event()
    ag_ui = asyncio.create_task(sse_data(api, "GET", "/ag-ui/threads/shared-chat/stream",
                                         opened))
    await api.wait_status(run_id, "running", within=60)
    await asyncio.wait_for(opened.wait(), 60)  # the reconnect found the run before it ends
    GATE.set()
    chunks, frames, events = await asyncio.wait_for(asyncio.gather(ai_sdk, native, ag_ui), 60)
    assert chunks[0] == {"type": "start", "messageId": run_id,
                         "messageMetadata": {"run_id": run_id, "model": "fake:test",
                                             "events_url": f"/runs/{run_id}/events"}}
    assert chunks[-1]["type"] == "finish" and frames[-1].event == "agent_end"
    typed = [EVENT.validate_python(e) for e in events]
    assert typed[0].type.value == "RUN_STARTED" and typed[0].run_id == run_id
    assert typed[-1].type.value == "RUN_FINISHED" and typed[-1].result == "all done"
    calls = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    tool_out = [c for c in chunks if c["type"] == "tool-output-available"]
    assert calls[0]["toolCallId"] == tool_out[0]["toolCallId"] and calls[0]["content"] == "opened"


async def test_the_dialects_authenticate_and_keep_tenants_apart() -> None:
    async with serve(api_key="key-a", api_keys="key-a:alpha,key-b:beta") as api:
        api.fake.script = [fake.text("for alpha")]
        anonymous = await api.client.post("/ai-sdk/chat", json=chat_body("c1", "hi"),
                                          headers={"Authorization": ""})
        assert anonymous.status_code == 401
        no_key = await api.client.post("/ag-ui", headers={"Authorization": ""}, json={
            "threadId": "c1", "runId": "r", "messages": []})
        assert no_key.status_code == 401
        GATE.clear()
        api.fake.script = [fake.tool_calls(("dialect_gate", {})), fake.text("done")]
        started = asyncio.create_task(sse_data(api, "POST", "/ai-sdk/chat", json=chat_body(
            "alpha-chat", "go", tools=["dialect_gate"])))
        await chat_run(api, "alpha-chat")
        beta = {"Authorization": "Bearer key-b"}
        for url in ("/ai-sdk/chat/alpha-chat/stream", "/ag-ui/threads/alpha-chat/stream"):
            assert (await api.client.get(url, headers=beta)).status_code == 204
        GATE.set()
        assert (await asyncio.wait_for(started, 60))[-1]["type"] == "finish"


@function(toolsets=["api_testing"], approval=True)
def dialect_guarded(note: str) -> str:
    """Needs a person's approval (test tool)."""
    return f"approved: {note}"


async def test_a_parked_run_ends_the_ai_sdk_response_and_native_answers_still_work(
        api: Api) -> None:
    """The AI SDK's response ends at the park (the SDK answers in its next request), and so
    does the chat's resume while the run waits; an answer through the native endpoint works
    as well."""
    api.fake.script = [fake.tool_calls(("dialect_guarded", {"note": "x"})), fake.text("ok")]
    chunks = await asyncio.wait_for(sse_data(api, "POST", "/ai-sdk/chat", json=chat_body(
        "parked-chat", "go", tools=["dialect_guarded"])), 60)
    assert [c["type"] for c in chunks[-2:]] == ["tool-approval-request", "finish"]
    assert chunks[-1]["messageMetadata"]["stop_reason"] == "requires_action"
    run = await api.wait_status(await chat_run(api, "parked-chat"), "requires_action", within=60)
    call_id = run["pending"][0]["tool_call_id"]
    replay = await asyncio.wait_for(sse_data(api, "GET", "/ai-sdk/chat/parked-chat/stream"), 60)
    assert replay == chunks  # a reload while it waits shows the request again
    answer = await api.client.post(f"/runs/{run['id']}/approvals",
                                   json={"tool_call_id": call_id, "decision": "approve"})
    assert answer.status_code < 300, answer.text
    done = await api.wait_status(run["id"], "completed", within=60)
    assert done["result"] == "ok"


async def test_an_ag_ui_approval_is_a_custom_event_and_the_stream_waits_for_the_answer(
        api: Api) -> None:
    api.fake.script = [fake.tool_calls(("dialect_guarded", {"note": "y"})), fake.text("ok")]
    opened = asyncio.Event()
    stream = asyncio.create_task(sse_data(api, "POST", "/ag-ui", opened, json={
        "threadId": "ag-approve", "runId": "r1", "messages": [
            {"id": "u1", "role": "user", "content": "go"}],
        "forwardedProps": {"agentloop": {"tools": ["dialect_guarded"]}}}))
    await asyncio.wait_for(opened.wait(), 60)
    run = await api.wait_status(await chat_run(api, "ag-approve"), "requires_action", within=60)
    assert not stream.done()  # AG-UI has no approvals: the stream waits
    call_id = run["pending"][0]["tool_call_id"]
    answer = await api.client.post(f"/runs/{run['id']}/approvals",
                                   json={"tool_call_id": call_id, "decision": "approve"})
    assert answer.status_code < 300, answer.text
    events = await asyncio.wait_for(stream, 60)
    custom = [e for e in events if e["type"] == "CUSTOM"
              and e["name"] == "agentloop.approval_requested"]
    assert custom[0]["value"]["toolCallId"] == call_id and custom[0]["value"]["runId"] == run["id"]
    typed = [EVENT.validate_python(e) for e in events]
    assert typed[-1].type.value == "RUN_FINISHED"


@function(toolsets=["api_testing"])
async def dialect_subagent(task: str) -> str:
    """Runs a nested loop (test tool)."""
    from app import runtime

    out = await runtime.exec(task)
    return f"inner said: {out.text}"


async def test_an_ag_ui_subagent_approval_is_a_custom_event_naming_its_parent(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("dialect_subagent", {"task": "t"}, "o1")),
                       fake.tool_calls(("dialect_guarded", {"note": "z"}, "n1")),
                       fake.text("inner ok"), fake.text("ok")]
    opened = asyncio.Event()
    stream = asyncio.create_task(sse_data(api, "POST", "/ag-ui", opened, json={
        "threadId": "ag-nested", "runId": "r1", "messages": [
            {"id": "u1", "role": "user", "content": "go"}],
        "forwardedProps": {"agentloop": {"tools": ["dialect_subagent", "dialect_guarded"]}}}))
    await asyncio.wait_for(opened.wait(), 60)
    run = await api.wait_status(await chat_run(api, "ag-nested"), "requires_action", within=60)
    assert not stream.done()
    answer = await api.client.post(f"/runs/{run['id']}/approvals",
                                   json={"tool_call_id": "n1", "decision": "approve"})
    assert answer.status_code < 300, answer.text
    events = await asyncio.wait_for(stream, 60)
    [custom] = [e for e in events if e["type"] == "CUSTOM"
                and e["name"] == "agentloop.approval_requested"]
    assert custom["value"]["toolCallId"] == "n1" and custom["value"]["depth"] == 1
    assert custom["value"]["parentToolCallId"] == "o1" and custom["value"]["subagentRunId"]
    typed = [EVENT.validate_python(e) for e in events]
    assert typed[-1].type.value == "RUN_FINISHED"
