"""Whole runs driven by the embedded worker and a scripted FakeProvider, watched over SSE."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from providers import fake
from tests.api.conftest import Api
from tests.support.sse_client import Frame, open_stream, read_all
from tool_registry import function


@function(toolsets=["api_testing"])
async def api_slow(seconds: float) -> str:
    """Sleeps (test tool)."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@function(toolsets=["api_testing"])
async def api_gate(path: str) -> str:
    """Runs until the file ``path`` exists (test tool: the test decides when it ends, so no
    sleep has to outlast the test's own requests on a loaded machine)."""
    async with asyncio.timeout(60):
        while not os.path.exists(path):  # noqa: ASYNC240 (a stat on tmp)
            await asyncio.sleep(0.01)
    return "opened"


@function(toolsets=["api_testing"])
def api_echo(text: str) -> str:
    """Echoes (test tool)."""
    return text


class Watch:
    """Collects a run's frames in the background; ``until`` waits for a type."""

    def __init__(self, api: Api, run_id: str) -> None:
        self.frames: list[Frame] = []
        self._task = asyncio.create_task(self._read(api, run_id))

    async def _read(self, api: Api, run_id: str) -> None:
        async with open_stream(api.client, f"/runs/{run_id}/events") as stream:
            async for frame in stream:
                self.frames.append(frame)

    async def until(self, type_: str, within: float = 30.0) -> Frame:
        async with asyncio.timeout(within):
            while True:
                for frame in self.frames:
                    if frame.event == type_:
                        return frame
                await asyncio.sleep(0.01)

    async def done(self) -> list[Frame]:
        async with asyncio.timeout(10):
            await self._task
        return self.frames


def types(frames: list[Frame]) -> list[str]:
    return [f.event for f in frames]


def user_texts(request: Any) -> list[str]:
    return [m.content if isinstance(m.content, str) else m.content[0].text
            for m in request.messages if m.role == "user"]


async def test_a_text_run_completes(api: Api) -> None:
    api.fake.script = [fake.text("hello there", chunks=3)]
    run = await api.create(input="hi", tools=[])
    frames = await read_all(api.client, run["events_url"])
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert types(frames)[:2] == ["run_created", "agent_start"]
    assert frames[0].data["status"] == "queued" and frames[0].data["model"] == run["model"]
    assert types(frames)[-1] == "agent_end"
    done = await api.wait_status(run["id"], "completed")
    assert done["stop_reason"] == "stop" and done["result"] == "hello there"
    assert done["error"] is None and done["started_at"] and done["ended_at"]
    assert [m["role"] for m in done["messages"]] == ["user", "assistant"]
    assert done["usage"]["input_tokens"] == 10 and done["usage"]["output_tokens"] == 5
    listed = (await api.client.get("/runs", params={"status": "completed"})).json()["runs"]
    assert [r["id"] for r in listed] == [run["id"]]


async def test_steer_during_a_tool_skips_the_rest_and_injects_the_message(
        api: Api, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    api.fake.script = [fake.tool_calls(("api_gate", {"path": str(gate)}),
                                       ("api_echo", {"text": "never"})),
                       fake.text("steered")]
    run = await api.create(input="go", toolset="api_testing")
    watch = Watch(api, run["id"])
    await watch.until("tool_execution_start")
    resp = await api.client.post(f"/runs/{run['id']}/steer", json={"content": "stop that"})
    gate.touch()
    assert resp.status_code == 202
    body = resp.json()
    assert body["kind"] == "steer" and body["position"] == 1
    frames = await watch.done()
    queued = next(f for f in frames if f.event == "message_queued")
    assert queued.data["message_id"] == body["message_id"]
    ends = [f.data for f in frames if f.event == "tool_execution_end"]
    assert [e["tool_name"] for e in ends] == ["api_gate", "api_echo"]
    assert ends[1]["is_error"] is True
    assert user_texts(api.fake.requests[1])[-1] == "stop that"
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "steered"


async def test_follow_up_after_a_text_reply(api: Api) -> None:
    api.fake.script = [fake.text("first answer", chunks=6, delay=0.05), fake.text("second")]
    run = await api.create(input="q1", tools=[])
    watch = Watch(api, run["id"])
    await watch.until("message_update")
    resp = await api.client.post(f"/runs/{run['id']}/follow_up", json={"content": "q2"})
    assert resp.status_code == 202 and resp.json()["kind"] == "follow_up"
    await watch.done()
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "second"
    assert user_texts(api.fake.requests[1]) == ["q1", "q2"]
    assert [m["role"] for m in done["messages"]] == ["user", "assistant", "user", "assistant"]
    resp = await api.client.post(f"/runs/{run['id']}/steer", json={"content": "late"})
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "run_ended"


async def _cancel_and_check(api: Api, run_id: str, watch: Watch) -> None:
    first = await api.client.post(f"/runs/{run_id}/cancel")
    again = await api.client.post(f"/runs/{run_id}/cancel")
    assert first.status_code == 202 and again.status_code == 202
    frames = await watch.done()
    assert frames[-1].event == "agent_end" and frames[-1].data["stop_reason"] == "aborted"
    done = await api.wait_status(run_id, "cancelled")
    assert done["stop_reason"] == "aborted"
    assert (await api.client.post(f"/runs/{run_id}/cancel")).status_code == 202


async def test_cancel_during_a_tool(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("api_slow", {"seconds": 30}))]
    run = await api.create(input="go", toolset="api_testing")
    watch = Watch(api, run["id"])
    await watch.until("tool_execution_start")
    await _cancel_and_check(api, run["id"], watch)


async def test_cancel_during_model_streaming(api: Api) -> None:
    api.fake.script = [fake.hanging("partial")]
    run = await api.create(input="go", tools=[])
    watch = Watch(api, run["id"])
    await watch.until("message_update")
    await _cancel_and_check(api, run["id"], watch)
    assert api.fake.closed == 1


async def test_queue_list_and_withdraw(api: Api, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    api.fake.script = [fake.tool_calls(("api_gate", {"path": str(gate)})), fake.hanging()]
    run = await api.create(input="go", toolset="api_testing")
    rid = run["id"]
    watch = Watch(api, rid)
    await watch.until("tool_execution_start")
    a = (await api.client.post(f"/runs/{rid}/steer", json={"content": "a"})).json()
    b = (await api.client.post(f"/runs/{rid}/follow_up", json={"content": "b"})).json()
    c = (await api.client.post(f"/runs/{rid}/follow_up", json={"content": "c"})).json()
    assert c["position"] == 2
    listed = (await api.client.get(f"/runs/{rid}/queue")).json()["messages"]
    assert [(m["message_id"], m["kind"], m["position"], m["content"]) for m in listed] == [
        (a["message_id"], "steer", 1, "a"), (b["message_id"], "follow_up", 1, "b"),
        (c["message_id"], "follow_up", 2, "c")]
    assert (await api.get(rid))["queue"] == {"steer": 1, "follow_up": 2}
    resp = await api.client.delete(f"/runs/{rid}/queue/{b['message_id']}")
    assert resp.status_code == 204
    assert (await api.client.delete(f"/runs/{rid}/queue/{b['message_id']}")).status_code == 404
    gate.touch()
    await watch.until("turn_start")
    async with asyncio.timeout(30):  # the steer message is taken after the tool
        while (await api.get(rid))["queue"]["steer"]:
            await asyncio.sleep(0.02)
    resp = await api.client.delete(f"/runs/{rid}/queue/{a['message_id']}")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "message_taken"
    await api.client.post(f"/runs/{rid}/cancel")
    frames = await watch.done()
    withdrawn = [f.data for f in frames if f.event == "message_withdrawn"]
    assert [w["message_id"] for w in withdrawn] == [b["message_id"]]


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


async def test_runs_update_the_metrics(api: Api) -> None:
    before = (await api.client.get("/metrics")).text
    api.fake.script = [fake.tool_calls(("api_echo", {"text": "x"})), fake.text("done")]
    run = await api.create(input="go", toolset="api_testing")
    await read_all(api.client, run["events_url"])
    await api.wait_status(run["id"], "completed")
    after = (await api.client.get("/metrics")).text
    ended = {"status": "completed", "stop_reason": "stop"}
    assert metric(after, "agentloop_runs_ended_total", **ended) == \
        metric(before, "agentloop_runs_ended_total", **ended) + 1
    assert metric(after, "agentloop_events_written_total") >= \
        metric(before, "agentloop_events_written_total") + 15
    calls = "agentloop_provider_latency_seconds_count"
    assert metric(after, calls, provider="fake") == metric(before, calls, provider="fake") + 2
    tools = "agentloop_tool_latency_seconds_count"
    assert metric(after, tools, tool="api_echo", outcome="ok") == \
        metric(before, tools, tool="api_echo", outcome="ok") + 1
    for _ in range(100):  # the runner lets go of the run just after it reads as completed
        if metric((await api.client.get("/metrics")).text, "agentloop_active_runs") == 0:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("agentloop_active_runs stayed above 0")
