"""Watching ``agentloop serve --processes N`` from outside, as an operator would: its children
from ``/proc``, what each logged (every line carries its pid), requests over new connections."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import orjson

T = TypeVar("T")
SERVING = re.compile(r"process (\d+) serving")


def _stat(pid: int | str) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def children_of(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is ``pid``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(entry.name)) is not None \
                and stat[1] == pid and stat[0] != "Z":
            found.add(int(entry.name))
    return found


def is_server_child(pid: int) -> bool:
    """The process is one of a supervisor's API processes (``app.process.child``)."""
    try:
        return b"app.process.child" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def metrics_dirs(root: Path) -> list[Path]:
    """The supervisor's shared metrics directories under ``root`` (its TMPDIR)."""
    return list(root.glob("agentloop-metrics-*"))


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


class ServeLog:
    """The JSON log of the supervisor and its children (one file, every line with a pid)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[dict[str, Any]]:
        raw = self.path.read_bytes() if self.path.exists() else b""
        return [orjson.loads(line) for line in raw.splitlines() if line.startswith(b"{")]

    def text(self) -> str:
        return self.path.read_text(errors="replace") if self.path.exists() else ""

    def serving(self) -> list[int]:
        """Children the supervisor saw serving, in order."""
        return [int(m.group(1)) for line in self.lines()
                if line["logger"] == "app.process.supervisor"
                and (m := SERVING.search(line["message"]))]

    def answered(self, request: str) -> Counter[int]:
        """Pid → how many ``request`` (``POST /runs``) its access log shows."""
        return Counter(line["pid"] for line in self.lines()
                       if line["logger"] == "uvicorn.access" and f'"{request} ' in line["message"])


async def until(check: Callable[[], T | None], within: float, what: str) -> T:
    """Poll ``check`` (in a thread: it reads files) until it returns something truthy."""
    try:
        async with asyncio.timeout(within):
            while not (found := await asyncio.to_thread(check)):
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"not within {within} s: {what}") from None
    return found


def fresh_connections(port: int) -> httpx.AsyncClient:
    """A client whose every request opens a new connection (the server closes each one), so
    the kernel picks a process for each."""
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(60.0),
                             headers={"Connection": "close"})


def metric(text: str, name: str) -> float:
    """One sample's value from a Prometheus exposition (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
