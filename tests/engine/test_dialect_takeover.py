"""A run started through a dialect endpoint survives its worker's SIGKILL mid-reply.

The API (uvicorn on a real socket, Redis backend, no embedded worker) takes
``POST /ai-sdk/chat`` or ``POST /ag-ui``; worker process A holds the run, stalled mid-text,
mid tool-call arguments or in the tool (``takeover_script``); once the client has read that
far (and, for the tool, A has started it), B starts,
A is SIGKILLed, B takes the run over when A's lease lapses and makes the interrupted model
call again. The client's stream, and a resume request opened right after the kill, go on to
the end, and the real clients' parsers (``ai``'s chunk schema and ``readUIMessageStream``,
``@ag-ui/client``'s verifier and message builder) build the whole reply from them, each text
once (``app.dialects.takeover``).
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.engine.resume import TOOL_LOST, WORKER_LOST
from app.store import make_backend
from tests.api.conftest import Api, serve
from tests.engine import takeover_script as script
from tests.engine.harness import events, wait_event
from tests.engine.processes import spawn_worker, stop_all, wait_alive
from tests.js.node_client import run_node
from tool_registry import default_registry

pytestmark = pytest.mark.timeout(240)
LEASE = 3.0
FACTORY = {"AGENTLOOP_PROVIDER_FACTORY": "tests.engine.takeover_script:factory"}
script.register(default_registry)  # the API checks the tool names a request asks for


class Capture:
    """One streaming response read to its end in a task; ``seen`` is set once ``ready`` holds
    for the bytes read so far."""

    def __init__(self, client: httpx.AsyncClient, method: str, url: str,
                 ready: Callable[[bytes], bool] = lambda _: True, **kwargs: Any) -> None:
        self.body = bytearray()
        self.status = 0
        self.seen = asyncio.Event()
        self._ready = ready
        self.task = asyncio.create_task(self._read(client, method, url, kwargs))

    async def _read(self, client: httpx.AsyncClient, method: str, url: str,
                    kwargs: dict[str, Any]) -> None:
        async with client.stream(method, url, timeout=httpx.Timeout(120.0), **kwargs) as resp:
            self.status = resp.status_code
            async for chunk in resp.aiter_bytes():
                self.body += chunk
                if self._ready(bytes(self.body)):
                    self.seen.set()

    async def text(self) -> str:
        await asyncio.wait_for(self.task, 120)
        assert self.status == 200
        return self.body.decode()


def data(body: str) -> list[Any]:
    """The JSON of every ``data:`` line (``[DONE]`` as a string)."""
    return [line[6:] if line == "data: [DONE]" else orjson.loads(line[5:])
            for line in body.split("\n") if line.startswith("data:")]


def counts(kind: bytes, n: int) -> Callable[[bytes], bool]:
    return lambda body: body.count(kind) >= n


DIALECTS: dict[str, dict[str, Any]] = {
    "ai-sdk": {"post": "/ai-sdk/chat", "resume": "/ai-sdk/chat/{chat}/stream",
               "body": lambda chat: {"id": chat, "tools": ["takeover_weather"], "messages": [
                   {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Oslo?"}]}]},
               "text": b'"type":"text-delta"', "args": b'"type":"tool-input-delta"',
               "tool": b'"type":"tool-input-available"'},
    "ag-ui": {"post": "/ag-ui", "resume": "/ag-ui/threads/{chat}/stream",
              "body": lambda chat: {"threadId": chat, "runId": "r1", "messages": [
                  {"id": "u1", "role": "user", "content": "Oslo?"}],
                  "forwardedProps": {"agentloop": {"tools": ["takeover_weather"]}}},
              "text": b'"type":"TEXT_MESSAGE_CONTENT"', "args": b'"type":"TOOL_CALL_ARGS"',
              "tool": b'"type":"TOOL_CALL_END"'},
}


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Api]:
    backend = make_backend(redis_url, lease=LEASE, run_ttl=3600)
    async with serve(backend=backend, worker=False) as running:
        yield running


def run_of(body: bytes) -> str:
    """The run id in a dialect stream's first event."""
    first = data(body.decode())[0]
    return str(first.get("messageId") or first["runId"])


@pytest.mark.parametrize("cut", ["text", "args", "tool"])
@pytest.mark.parametrize("dialect", ["ai-sdk", "ag-ui"])
async def test_the_dialect_stream_goes_on_after_its_worker_is_killed(
        api: Api, redis_url: str, tmp_path: Path, dialect: str, cut: str) -> None:
    spec, chat = DIALECTS[dialect], f"takeover-{dialect}-{cut}"
    a = spawn_worker(redis_url, "A", tmp_path / "marks", lease=LEASE,
                     extra_env={**FACTORY, "AGENTLOOP_TEST_STALL": cut})
    b = None
    try:
        await wait_alive(redis_url, "A")
        live = Capture(api.client, "POST", spec["post"], json=spec["body"](chat),
                       ready=counts(spec[cut], 1 if cut == "tool" else script.STALL_AFTER))
        await asyncio.wait_for(live.seen.wait(), 60)  # A streamed that far and stalls
        if cut == "tool":  # ... in the tool
            await api.call(wait_event(api.backend, run_of(bytes(live.body)),
                                      "tool_execution_start", timeout=60))
        b = spawn_worker(redis_url, "B", tmp_path / "marks", lease=LEASE, extra_env=FACTORY)
        await wait_alive(redis_url, "B")
        a.send_signal(signal.SIGKILL)
        resumed = Capture(api.client, "GET", spec["resume"].format(chat=chat))
        bodies = [await live.text(), await resumed.text()]
    finally:
        stop_all(a, *([b] if b else []))
    run_id = run_of(bodies[0].encode())
    await assert_taken_over(api, run_id, cut)
    after = await api.client.get(spec["resume"].format(chat=chat))
    assert after.status_code == 204  # the run is over: a reload finds nothing to resume
    for body in bodies:
        if dialect == "ai-sdk":
            await assert_ai_sdk(body, run_id)
        else:
            await assert_ag_ui(body, run_id)


async def assert_taken_over(api: Api, run_id: str, cut: str) -> None:
    """The run completed on B, after A's reply was cut off mid-stream (or its tool)."""
    run = await api.wait_status(run_id, "completed", within=60)
    assert run["result"] == script.ANSWER
    log = await api.call(events(api.backend, run_id))
    lost = [e for e in log if e["type"] == "message_end" and
            e["message"].get("error_message") == WORKER_LOST]
    lost_tool = [e for e in log if e["type"] == "tool_execution_end" and
                 e["result"]["content"][0]["text"] == TOOL_LOST]
    resumed = [e for e in log if e["type"] == "run_resumed"]
    assert (len(lost), len(lost_tool)) == ((0, 1) if cut == "tool" else (1, 0))
    assert [(e["worker"], e["attempt"]) for e in resumed] == [("B", 2)]


async def assert_ai_sdk(body: str, run_id: str) -> None:
    chunks = data(body)
    assert chunks[-1] == "[DONE]"
    kinds = Counter(c["type"] for c in chunks[:-1])
    assert kinds["start"] == kinds["finish"] == 1 and kinds["error"] == kinds["abort"] == 0
    assert kinds["tool-output-error"] == kinds["tool-input-error"] == 0
    assert kinds["text-start"] == kinds["text-end"] == 2  # no part cut off, none repeated
    out = await run_node("replay_frames.mjs", {"dialect": "ai-sdk", "body": body}, package="ai")
    assert out["errors"] == []
    message = out["message"]
    assert message["id"] == run_id and message["metadata"]["stop_reason"] == "stop"
    parts = message["parts"]
    assert [p["type"] for p in parts] == ["step-start", "text", "tool-takeover_weather",
                                          "step-start", "text"]
    assert [(p["text"], p["state"]) for p in parts if p["type"] == "text"] == [
        (script.INTRO, "done"), (script.ANSWER, "done")]
    tool = parts[2]
    assert (tool["toolCallId"], tool["state"], tool["input"]) == (
        script.CALL_ID, "output-available", script.ARGS)
    assert tool["output"]["content"] == [{"type": "text", "text": "snow in Oslo"}]


async def assert_ag_ui(body: str, run_id: str) -> None:
    events_ = data(body)
    kinds = [e["type"] for e in events_]
    assert kinds.count("RUN_FINISHED") == 1 and kinds[-1] == "RUN_FINISHED"
    assert "RUN_ERROR" not in kinds and events_[-1]["result"] == script.ANSWER
    for start, end in (("TEXT_MESSAGE_START", "TEXT_MESSAGE_END"),
                       ("TOOL_CALL_START", "TOOL_CALL_END"), ("STEP_STARTED", "STEP_FINISHED")):
        key = "stepName" if start == "STEP_STARTED" else \
            "toolCallId" if start == "TOOL_CALL_START" else "messageId"
        opened = sorted(e[key] for e in events_ if e["type"] == start)
        assert opened == sorted(e[key] for e in events_ if e["type"] == end)
        assert len(opened) == len(set(opened)), f"{start} twice"
    out = await run_node("replay_frames.mjs", {"dialect": "ag-ui", "body": body},
                         package="@ag-ui/client")
    assert out["errors"] == []
    replies = [m for m in out["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in replies] == [script.INTRO, script.ANSWER]
    calls = replies[0]["toolCalls"]
    assert [(c["id"], orjson.loads(c["function"]["arguments"])) for c in calls] == [
        (script.CALL_ID, script.ARGS)]
    results = [(m["toolCallId"], m["content"]) for m in out["messages"] if m["role"] == "tool"]
    assert results == [(script.CALL_ID, "snow in Oslo")]
    assert events_[0]["runId"] == run_id
