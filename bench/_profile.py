"""Where a server's CPU goes: py-spy samples it for a while; self time summed per file and per
function (the leaf Python frame of each sample; C code counts for the Python line calling it).

``record(pid, seconds)`` runs ``py-spy record --format raw --nonblocking --gil`` (the target is
not paused, so sampling barely disturbs it; only samples holding the GIL count, so the event
loop's wait in ``epoll`` is not mistaken for work) and returns the summary, or
``{"skipped": why}`` when py-spy is missing or may not attach.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?)(?::\d+)?\)$")
RATE = 200
TOP = 14


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3", "/work/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return re.sub(r"^\.?\d+/", "stdlib/", path.split("wt/", 1)[-1])


# the stage of a frame's path each file belongs to (first match wins)
STAGES = [
    ("model read: TLS, HTTP/1.1", ("ssl.py", "providers/_transport.py", "providers/_http.py",
                                   "httpx/", "httpcore/", "h11/", "anyio/")),
    ("model parse: SSE, wire JSON", ("providers/_sse.py", "providers/openai", "providers/_openai",
                                     "providers/_stream_guard.py", "providers/events.py")),
    ("loop: accumulate, events", ("providers/accumulate.py", "providers/partial_json.py",
                                  "app/loop/", "app/engine/", "app/telemetry/metrics.py",
                                  "prometheus_client/")),
    ("sink: encode, batch", ("app/worker/sink.py", "app/engine/events.py", "app/run_sink.py")),
    ("backend: append, wake, read", ("app/backends/", "app/store/", "redis/")),
    ("run start and end: pipeline, claim, bookkeeping", ("app/api/", "app/worker/",
                                                          "pydantic", "app/dialects/")),
    ("SSE out: frames, ASGI, socket", ("app/delivery/", "app/sse",
                                       "uvicorn/", "starlette/", "sse_starlette/", "fastapi/")),
    ("event loop, tasks, timers", ("asyncio/", "uvloop/", "<string>", "concurrent/")),
]


def stage(file: str) -> str:
    """The stage ``file``'s self time is charged to (``other`` when none matches)."""
    for name, prefixes in STAGES:
        if any(p in file for p in prefixes):
            return name
    return "other"


def summarize(raw: str) -> dict[str, Any]:
    """Self-time shares per file and per function from py-spy's raw (collapsed) output."""
    files: Counter[str] = Counter()
    funcs: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        m = _FRAME.match(leaf)
        file, func = (_short(m["file"]), m["func"]) if m else ("?", leaf)
        n = int(count)
        total += n
        files[file] += n
        funcs[f"{func} ({file})"] += n

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in counter.most_common(TOP)]

    stages: Counter[str] = Counter()
    for file, n in files.items():
        stages[stage(file)] += n
    return {"samples": total, "stages_pct": share(stages), "files_pct": share(files),
            "functions_pct": share(funcs)}


def record(pid: int, seconds: float) -> dict[str, Any]:
    """Sample ``pid`` for ``seconds`` (see the module doc)."""
    exe = _py_spy()
    if exe is None:
        return {"skipped": "py-spy not installed (pip install py-spy)"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "raw.txt"
        proc = subprocess.run([exe, "record", "--pid", str(pid), "--duration",
                               str(max(1, round(seconds))), "--rate", str(RATE), "--format",
                               "raw", "--nonblocking", "--gil", "--output", str(out)],
                              capture_output=True, text=True, timeout=seconds + 60)
        if proc.returncode != 0 or not out.exists():
            return {"skipped": f"py-spy failed: {proc.stderr.strip()[-300:]}"}
        return summarize(out.read_text())
