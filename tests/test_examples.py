"""The README's runnable example really runs (offline, with the demo model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_example_runs_a_tool_loop() -> None:
    out = subprocess.run([sys.executable, "examples/quickstart.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}).stdout
    lines = out.splitlines()
    assert lines[0] == "stop"
    assert lines[1] == "[demo model] The tool `add` returned:" and lines[2] == "5"
    assert lines[3].split() == ["user", "assistant", "tool_result", "assistant"]
    assert lines[4] == "tool result: 42"
