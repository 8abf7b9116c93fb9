"""A run's deadline (``timeout``, ``AGENTLOOP_RUN_TIMEOUT``), the default ``max_tokens`` and a
forced deferred tool, over HTTP with the embedded worker (issue 9, items 12 and 15)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from providers import fake
from providers.base import ForcedTool
from tests.api.conftest import Api, serve
from tests.support.sse_client import read_all
from tool_registry import default_registry, function


@pytest.mark.parametrize("value", [0, -1, "5", True, 3601])
async def test_a_bad_timeout_is_422_naming_the_field(api_no_worker: Api, value: Any) -> None:
    resp = await api_no_worker.client.post("/runs", json={"input": "hi", "timeout": value})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["field"] == "timeout"


async def test_the_server_timeout_is_the_ceiling_unless_it_is_off() -> None:
    async with serve(worker=False, run_timeout=10) as api:
        resp = await api.client.post("/runs", json={"input": "hi", "timeout": 11})
        assert resp.status_code == 422
        assert "at most 10 seconds" in resp.json()["error"]["message"]
        await api.create(input="hi", timeout=9.5)
    async with serve(worker=False, run_timeout=0) as api:
        await api.create(input="hi", timeout=86_400 * 30)


async def test_a_run_past_its_timeout_fails_with_a_clear_error() -> None:
    async with serve() as api:
        api.fake.script = [fake.hanging("and then, and then")]
        run = await api.create(input="go on forever", tools=[], timeout=0.5)
        frames = await read_all(api.client, run["events_url"])
        done = await api.wait_status(run["id"], "failed", within=30)
    end = frames[-1]
    assert end.event == "agent_end" and [f.event for f in frames].count("agent_end") == 1
    assert end.data["stop_reason"] == "error" == done["stop_reason"]
    assert done["error"] == end.data["error"] == (
        "run timed out: it passed its deadline of 0.5 s (the run's timeout) and was stopped")
    assert api.fake.closed == 1


async def test_model_calls_get_the_default_max_tokens_unless_the_run_sets_one() -> None:
    async with serve() as api:
        api.fake.script = [fake.text("a"), fake.text("b")]
        first = await api.create(input="hi", tools=[])
        await api.wait_status(first["id"], "completed")
        second = await api.create(input="hi", tools=[], max_tokens=12)
        await api.wait_status(second["id"], "completed")
        assert [r.max_tokens for r in api.fake.requests] == [8192, 12]
    async with serve(default_max_tokens=0) as api:
        api.fake.script = [fake.text("a")]
        run = await api.create(input="hi", tools=[])
        await api.wait_status(run["id"], "completed")
        assert api.fake.requests[0].max_tokens is None


@pytest.fixture
def deferred_tool() -> Iterator[str]:
    """A deferred tool in the service's registry for one test (then removed again)."""
    @function(defer=True, toolsets=["api_deferred_set"])
    def api_vault(key: str) -> str:
        """Opens the vault (deferred test tool)."""
        return f"opened {key}"

    try:
        yield api_vault.name
    finally:
        default_registry.tools.pop(api_vault.name, None)
        default_registry._toolsets.pop("api_deferred_set", None)


async def test_forcing_a_deferred_tool_loads_it_for_the_run(deferred_tool: str) -> None:
    async with serve() as api:
        api.fake.script = [fake.tool_calls((deferred_tool, {"key": "k1"})), fake.text("ok")]
        run = await api.create(input="open", toolset="api_deferred_set",
                               tool_choice={"type": "function", "name": deferred_tool})
        done = await api.wait_status(run["id"], "completed")
    first = api.fake.requests[0]
    assert [t.name for t in first.tools] == [deferred_tool]
    assert first.tool_choice == ForcedTool(deferred_tool)
    result = next(m for m in done["messages"] if m["role"] == "tool_result")
    assert result["is_error"] is False and result["content"][0]["text"] == "opened k1"
