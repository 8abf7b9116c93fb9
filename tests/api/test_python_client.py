"""A Python client generated from the live server's ``/openapi.json`` by openapi-python-client
(the version pyproject.toml pins): ``python_client_driver.py`` uses it to create a run, read it,
steer it and read its events with typed access to tool calls and results; the driver and the
generated package pass ``mypy --strict`` before the driver runs against the server."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import serve
from tests.support.steer_gate import ANSWER, GATE_RESULT, gated_script, open_gate_after_steer

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
GENERATOR_CONFIG = "post_hooks: []\npackage_name_override: agentloop_client\n"
"""No formatter hooks (ruff on PATH is not the generator's business here)."""


async def run(*argv: str | Path, cwd: Path, within: float = 120) -> str:
    proc = await asyncio.create_subprocess_exec(*map(str, argv), cwd=cwd,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(within):
        out, err = await proc.communicate()
    assert proc.returncode == 0, (out + err).decode()
    return out.decode()


async def generate_client(base_url: str, build: Path) -> Path:
    """``agentloop_client`` generated from the served document, the driver beside it, both
    type-checked."""
    (build / "generator.yaml").write_text(GENERATOR_CONFIG)
    out = await run(BIN / "openapi-python-client", "generate", "--url",
                    f"{base_url}/openapi.json", "--meta", "none", "--output-path",
                    "agentloop_client", "--config", "generator.yaml", cwd=build)
    assert "Warning" not in out, out  # every schema and operation was understood
    shutil.copy(HERE / "python_client_driver.py", build / "driver.py")
    await run(BIN / "mypy", "--strict", "--no-incremental", "driver.py", "agentloop_client",
              cwd=build)
    return build / "driver.py"


@pytest.mark.timeout(240)
async def test_generated_python_client_drives_a_run(tmp_path: Path) -> None:
    async with serve(api_key="key-py", api_keys="key-py:scripts") as api:
        driver = await generate_client(api.url, tmp_path)
        api.fake.script = gated_script()
        async with open_gate_after_steer(api):
            seen: dict[str, Any] = json.loads(await run(sys.executable, driver, api.url,
                                                        "key-py", cwd=tmp_path))
    assert seen["created"]["status"] == "queued" and seen["created"]["year"] >= 2024
    assert seen["read"]["has_token"] and seen["steer"] == {"kind": "steer", "position": 1}
    call_id = seen["calls"][0]["id"]
    assert seen["picks"] == [{"id": call_id, "name": "contract_gate", "arguments": {}}]
    assert seen["calls"] == [{"id": call_id, "name": "contract_gate", "args": {}}]
    assert seen["results"] == [{"id": call_id, "text": GATE_RESULT, "is_error": False}]
    assert seen["queued"] == ["steer"] and seen["answer"] == ANSWER
    assert seen["end"]["stop_reason"] == "stop" and seen["end"]["total_tokens"] > 0
    assert seen["types"][0] == "run_created" and seen["types"][-1] == "agent_end"
    assert seen["end"]["last_seq"] == len(seen["types"])
    steer = api.fake.requests[1].messages[-1].content
    assert [block.text for block in steer] == ["and then stop"]
