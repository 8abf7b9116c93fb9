"""The toolkit dialects are views of one stored run: a run started through the AI SDK endpoint
is watched at once through the native stream and through AG-UI; the dialects authenticate and
isolate tenants like every route. (The real clients' tests are in tests/js.)"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson
from ag_ui.core import Event
from pydantic import TypeAdapter

from providers import fake
from tests.api.conftest import Api, serve
from tests.support.sse_client import read_all
from tool_registry import function

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


async def sse_data(api: Api, method: str, url: str, **kwargs: Any) -> list[dict[str, Any]]:
    async with api.client.stream(method, url, **kwargs) as resp:
        assert resp.status_code == 200, await resp.aread()
        return [orjson.loads(line[5:]) async for line in resp.aiter_lines()
                if line.startswith("data:") and line != "data: [DONE]"]


async def test_one_run_through_three_views(api: Api) -> None:
    GATE.clear()
    api.fake.script = [fake.tool_calls(("dialect_gate", {})), fake.text("all done")]
    ai_sdk = asyncio.create_task(sse_data(api, "POST", "/ai-sdk/chat", json=chat_body(
        "shared-chat", "go", tools=["dialect_gate"])))
    runs: list[Any] = []
    while not runs:  # the run exists once the POST is answered
        await asyncio.sleep(0.02)
        runs = (await api.client.get("/runs", params={"metadata.chat_id": "shared-chat"})
                ).json()["runs"]
    run_id = runs[0]["id"]
    native = asyncio.create_task(read_all(api.client, f"/runs/{run_id}/events"))
    ag_ui = asyncio.create_task(sse_data(api, "GET", "/ag-ui/threads/shared-chat/stream"))
    await api.wait_status(run_id, "running")
    GATE.set()
    chunks, frames, events = await asyncio.wait_for(asyncio.gather(ai_sdk, native, ag_ui), 30)
    assert chunks[0] == {"type": "start", "messageId": run_id,
                         "messageMetadata": {"run_id": run_id,
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
        while not (await api.client.get("/runs")).json()["runs"]:
            await asyncio.sleep(0.02)
        beta = {"Authorization": "Bearer key-b"}
        for url in ("/ai-sdk/chat/alpha-chat/stream", "/ag-ui/threads/alpha-chat/stream"):
            assert (await api.client.get(url, headers=beta)).status_code == 204
        GATE.set()
        assert (await asyncio.wait_for(started, 30))[-1]["type"] == "finish"
