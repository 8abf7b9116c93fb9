"""Runs the Node scripts of tests/js (the npm packages package-lock.json pins) as real clients."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


async def run_node(script: str, spec: dict[str, Any], *, package: str, within: float = 60.0,
                   on_line: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``node <script> '<spec JSON>'`` in tests/js; its JSON report, the last line on stdout.
    Earlier lines are progress notes the script prints, handed to ``on_line`` as they come."""
    node = shutil.which("node")
    if node is None or not (HERE / "node_modules" / package).is_dir():
        pytest.fail("node or tests/js/node_modules missing: `make test` installs both (npm ci)")
    proc = await asyncio.create_subprocess_exec(node, str(HERE / script), json.dumps(spec),
                                                cwd=HERE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(within):
            lines = await _lines(proc, on_line or (lambda _: None))
            err = await proc.stderr.read() if proc.stderr else b""
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()
    assert lines, err.decode()
    return json.loads(lines[-1])  # type: ignore[no-any-return]


async def _lines(proc: asyncio.subprocess.Process, on_line: Callable[[str], None]) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    async for raw in proc.stdout:
        lines.append(raw.decode().rstrip("\n"))
        if not lines[-1].startswith("{"):
            on_line(lines[-1])
    return lines
