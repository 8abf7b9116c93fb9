"""Processes the harness starts (fake LLM, redis-server, agentloop, LangGraph) and /proc sampling.

Every server binds 127.0.0.1 on a free port. CPU is user+system ticks of a process tree (the root
and its live descendants, each with its reaped children's ticks); memory is VmRSS/VmHWM summed
over the tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench._tls import TLSFiles

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from 3 (state) on


def tree_pids(root: int) -> list[int]:
    """The root and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (f := _stat_fields(int(entry))):
            children.setdefault(int(f[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_cpu_s(root: int) -> float:
    """utime+stime+cutime+cstime summed over the tree, in seconds."""
    ticks = 0
    for pid in tree_pids(root):
        if f := _stat_fields(pid):
            ticks += sum(int(x) for x in f[11:15])
    return ticks / TICK


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy (not idle or iowait) since boot:
    over a window, the whole machine's load, other users' work included."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK


def tree_mem_mb(root: int) -> dict[str, float]:
    """``rss`` (now) and ``hwm`` (each process's peak) summed over the tree, in MiB."""
    rss = hwm = 0
    for pid in tree_pids(root):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm += int(line.split()[1])
    return {"rss": rss / 1024, "hwm": hwm / 1024}


@dataclass
class Proc:
    """A started server: its process, port and log file."""

    name: str
    popen: subprocess.Popen[bytes]
    port: int
    log: Path
    extra: list[Proc] = field(default_factory=list)
    ca: Path | None = None
    """The CA that signed this server's certificate: it serves https."""

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5) -> httpx.Response:
        verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=str(self.ca))
                                         if self.ca else True)
        return httpx.get(self.url + path, timeout=timeout, verify=verify)

    def cpu_s(self) -> float:
        return tree_cpu_s(self.popen.pid) + sum(p.cpu_s() for p in self.extra)

    def mem_mb(self) -> dict[str, float]:
        mems = [tree_mem_mb(self.popen.pid)] + [p.mem_mb() for p in self.extra]
        return {k: sum(m[k] for m in mems) for k in ("rss", "hwm")}

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)
        for p in self.extra:
            p.stop()

    def log_tail(self, n: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""


def start(name: str, argv: Sequence[str], port: int, *, env: dict[str, str] | None = None,
          cwd: Path = ROOT) -> Proc:
    """Spawn in its own process group, output to bench/out/<name>.log."""
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"{name}.log"
    with log.open("wb") as fh:
        popen = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=fh,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(name, popen, port, log)


def wait_http(proc: Proc, path: str, timeout: float = 60.0) -> None:
    """Poll GET path until it answers 2xx; raise with the log tail if the process dies first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited ({proc.popen.returncode}):\n{proc.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if proc.get(path, timeout=2).is_success:
                return
        time.sleep(0.2)
    proc.stop()
    raise RuntimeError(f"{proc.name} not ready after {timeout}s:\n{proc.log_tail()}")


def start_fake(delay_ms: float = 0.0, name: str = "fake_llm", tls: TLSFiles | None = None
               ) -> Proc:
    """``bench/fake_llm.py`` pacing frames ``delay_ms`` apart; https with ``tls``."""
    port = free_port()
    argv = [sys.executable, str(ROOT / "bench" / "fake_llm.py"), "--port", str(port),
            "--delay-ms", str(delay_ms)]
    if tls is not None:
        argv += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
    proc = start(name, argv, port)
    proc.ca = tls.ca if tls is not None else None
    wait_http(proc, "/v1/models", 15)
    return proc


def start_redis() -> Proc:
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--protected-mode", "yes", "--maxclients", "10000"]
    proc = start("redis", argv, port)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as s:
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                return proc
        time.sleep(0.1)
    proc.stop()
    raise RuntimeError(f"redis-server not ready:\n{proc.log_tail()}")


def fake_stats(fake: Proc) -> dict[str, int]:
    return dict(fake.get("/stats").json())
