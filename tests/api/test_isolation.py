"""One bad run never harms another: while a run's tool raises, another's provider fails and a
third is cancelled mid-stream, a fourth run beside them completes with its full event stream."""

from __future__ import annotations

import asyncio

from providers import fake
from providers.base import ModelRequest
from tests.api.conftest import Api
from tests.api.test_flows import Watch, types
from tests.support.sse_client import read_all
from tool_registry import function


@function(toolsets=["api_testing"])
async def api_isolation_boom(reason: str) -> str:
    """Raises (test tool)."""
    await asyncio.sleep(0.05)
    raise RuntimeError(f"boom: {reason}")


def _first_text(request: ModelRequest) -> str:
    content = request.messages[0].content
    return content if isinstance(content, str) else ""


def _by_run(request: ModelRequest) -> fake.Step:
    """Each run's script, chosen by its prompt (the runs share one fake provider)."""
    prompt, last = _first_text(request), request.messages[-1]
    if last.role == "tool_result":
        return fake.text(f"{prompt}: after the tool", chunks=3, delay=0.01)
    if prompt == "raising tool":
        return fake.tool_calls(("api_isolation_boom", {"reason": "bad"}))
    if prompt == "provider error":
        return fake.error("upstream exploded")
    if prompt == "cancelled":
        return fake.hanging("partial")
    return fake.tool_calls(("api_slow", {"seconds": 0.3}), delay=0.01)


async def test_bad_runs_do_not_disturb_a_good_one(api: Api) -> None:
    api.fake.script, api.fake.repeat = [_by_run], True
    tools = ["api_slow", "api_isolation_boom"]
    good = await api.create(input="good", tools=tools)
    watch = Watch(api, good["id"])
    bad = {prompt: await api.create(input=prompt, tools=tools)
           for prompt in ("raising tool", "provider error", "cancelled")}
    await api.wait_status(bad["cancelled"]["id"], "running")
    cancel = await api.client.post(f"/runs/{bad['cancelled']['id']}/cancel")
    assert cancel.status_code == 202, cancel.text

    frames = await watch.done()
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert types(frames)[:2] == ["run_created", "agent_start"]
    assert types(frames)[-1] == "agent_end"
    assert "tool_execution_end" in types(frames)
    assert all(f.data["run_id"] == good["id"] for f in frames)
    done = await api.wait_status(good["id"], "completed")
    assert done["result"] == "good: after the tool" and done["error"] is None

    raised = await api.wait_status(bad["raising tool"]["id"], "completed")
    assert raised["result"] == "raising tool: after the tool"
    assert raised["messages"][2]["is_error"] is True
    failed = await api.wait_status(bad["provider error"]["id"], "failed")
    assert "upstream exploded" in (failed["error"] or "")
    cancelled = await api.wait_status(bad["cancelled"]["id"], "cancelled")
    assert cancelled["stop_reason"] == "aborted"
    for run in bad.values():
        assert types(await read_all(api.client, run["events_url"]))[-1] == "agent_end"
