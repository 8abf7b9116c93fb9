"""examples/ag-ui-client/client.mjs, with its own pinned ``@ag-ui/client``, against a live
server: the tool call, its result and the streamed answer reach its output."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from providers import fake
from tests.api.conftest import Api
from tool_registry import function

# a few Node processes per test, on a machine shared with other suites (load 10-16 measured)
pytestmark = pytest.mark.timeout(120)


@function(toolsets=["js_testing"])
def example_client_weather(city: str) -> str:
    """The weather in a city (test tool)."""
    return f"sunny in {city}"


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ag-ui-client"


async def test_the_ag_ui_example_client_streams_a_tool_round_trip(api: Api) -> None:
    node = shutil.which("node")
    if node is None or not (EXAMPLE / "node_modules" / "@ag-ui" / "client").is_dir():
        pytest.fail("examples/ag-ui-client/node_modules missing: `make js-deps` installs it")
    api.fake.script = [fake.tool_calls(("example_client_weather", {"city": "Paris"})),
                       fake.text("It is sunny in Paris.", chunks=3)]
    env = {**os.environ, "AGENTLOOP_URL": api.url, "AGENTLOOP_TOOLS": "example_client_weather"}
    proc = await asyncio.create_subprocess_exec(
        node, "client.mjs", "Weather in Paris?", cwd=EXAMPLE, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0].startswith("[run run_")
    assert lines[1:] == ['[tool] example_client_weather({"city":"Paris"})',
                         "[result] sunny in Paris", "It is sunny in Paris."]
