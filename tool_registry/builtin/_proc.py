"""Running one code process to completion, with bounded output and no survivors.

Timeline of ``run_process``::

    start (own session/process group, sandboxed by ``sandbox.prepare``; a cancel during the
           spawn still kills what was started)
    ├─ pump stdout/stderr in 64 KiB chunks into HeadTail buffers (+ throttled progress)
    ├─ wait for: exit | timeout | ctx.cancel set | workspace past its cap (``quota.watch``)
    │            | task cancelled (CancelledError)
    └─ always: SIGKILL the process group (bwrap's death takes its PID namespace along),
       reap, give the pumps a moment to drain, then report or re-raise the cancellation

Background processes never outlive the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tool_registry.builtin import quota
from tool_registry.builtin._limits import HeadTail
from tool_registry.builtin.sandbox import Launch, prepare
from tool_registry.builtin.settings import current
from tool_registry.types import CancelSignal, Progress

CHUNK = 64 * 1024
PROGRESS_EVERY = 0.25
"""Seconds between progress updates of one stream."""


@dataclass(slots=True)
class Outcome:
    """How a code process ended and what it printed (each stream capped)."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    cancelled: bool
    seconds: float
    mode: str
    over_quota: str | None = None
    """Set when the workspace ended up past its size cap: what the model should know."""
    killed_for_quota: bool = False

    @property
    def failed(self) -> bool:
        """Whether the result is an error for the model (timeout, cancel, workspace full)."""
        return self.timed_out or self.cancelled or self.over_quota is not None

    def report(self, time_limit: float) -> str:
        """The text the model reads."""
        if self.timed_out:
            head = f"timed out after {time_limit:g} s; the process and its children were killed"
        elif self.cancelled:
            head = "cancelled; the process and its children were killed"
        elif self.killed_for_quota:
            head = "killed: the workspace passed its size limit"
        else:
            head = f"exit code: {self.exit_code}"
        parts = [head]
        if self.over_quota:
            parts.append(self.over_quota)
        if self.stdout:
            parts.append(f"--- stdout ---\n{self.stdout}")
        if self.stderr:
            parts.append(f"--- stderr ---\n{self.stderr}")
        return "\n".join(parts)

    def details(self) -> dict[str, Any]:
        """What the client sees beside the text."""
        return {"exit_code": self.exit_code, "timed_out": self.timed_out,
                "seconds": round(self.seconds, 3), "sandbox": self.mode}


async def _pump(stream: asyncio.StreamReader | None, sink: HeadTail, name: str,
                progress: Progress) -> None:
    last = 0.0
    while stream is not None and (chunk := await stream.read(CHUNK)):
        sink.feed(chunk)
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY:
            last = now
            progress({"stream": name, "text": chunk[-2000:].decode("utf-8", "replace")})


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(ConnectionError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (gone already is fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _until_exit(pid: int) -> None:
    """Return once ``pid`` has exited. Not ``Process.wait()``: on Python 3.11 that also waits
    for the pipes to close, which a background child holding stdout delays forever."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # exited and reaped already
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def _wait_exit(proc: asyncio.subprocess.Process, cancel: CancelSignal,
                     time_limit: float, ws: Path, limit: int | None) -> str:
    """``"exit"``, ``"timeout"``, ``"cancel"`` or ``"quota"`` (usage passed ``limit``),
    whichever comes first."""
    waiter = asyncio.ensure_future(_until_exit(proc.pid))
    cancelled = asyncio.ensure_future(cancel.wait())
    filled = asyncio.ensure_future(quota.watch(ws, limit) if limit else asyncio.Event().wait())
    futures = (waiter, cancelled, filled)
    try:
        done, _ = await asyncio.wait(futures, timeout=time_limit,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        for fut in futures:
            fut.cancel()
        await asyncio.gather(*futures, return_exceptions=True)
    if waiter in done:
        return "exit"
    if filled in done:
        return "quota"
    return "cancel" if cancelled in done else "timeout"


async def _budget(ws: Path) -> tuple[int | None, int | None]:
    """(bytes one file may take, usage past which the process is killed), None without a cap.
    A workspace already over its cap gets no room, and is not killed for shrinking."""
    cap = current().workspace_max_bytes
    if not cap:
        return None, None
    used = await asyncio.to_thread(quota.usage, ws)
    return max(cap - used, 0), max(cap, used)


async def _quota_note(ws: Path) -> str | None:
    cap = current().workspace_max_bytes
    if not cap:
        return None
    used = await asyncio.to_thread(quota.usage, ws)
    return quota.full_message(used, cap) if used > cap else None


async def _settle(proc: asyncio.subprocess.Process, helpers: list[asyncio.Task[None]]) -> None:
    kill_group(proc.pid)
    _, pending = await asyncio.wait(helpers, timeout=1.0)
    for task in pending:  # a child that left our process group may still hold a pipe
        task.cancel()
    await asyncio.gather(*helpers, return_exceptions=True)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 5)


async def _spawn(launch: Launch, ws: Path, stdin: bool) -> asyncio.subprocess.Process:
    """Start the process. The program runs before ``create_subprocess_exec`` returns (the
    loop still connects the pipes), so a cancel landing in between must not lose it: the spawn
    is shielded, and on cancel it is awaited, its group killed, and the cancel re-raised."""
    spawning = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *launch.argv, cwd=ws, env=launch.env, start_new_session=True,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE))
    try:
        return await asyncio.shield(spawning)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            proc = await spawning
            kill_group(proc.pid)
            await asyncio.wait_for(proc.wait(), 5)
        raise


async def run_process(command: list[str], ws: Path, *, time_limit: float, progress: Progress,
                      cancel: CancelSignal, stdin: bytes | None = None) -> Outcome:
    """Run ``command`` sandboxed in ``ws``; see the module timeline."""
    room, limit = await _budget(ws)
    launch = prepare(command, ws, room)
    cap = current().output_cap_chars
    out, err = HeadTail(cap), HeadTail(cap)
    started = time.monotonic()
    proc = await _spawn(launch, ws, stdin is not None)
    helpers = [asyncio.create_task(_pump(proc.stdout, out, "stdout", progress)),
               asyncio.create_task(_pump(proc.stderr, err, "stderr", progress))]
    if stdin is not None:
        helpers.append(asyncio.create_task(_feed(proc, stdin)))
    try:
        ended = await _wait_exit(proc, cancel, time_limit, ws, limit)
    finally:
        await _settle(proc, helpers)
    return Outcome(exit_code=proc.returncode if ended == "exit" else None,
                   stdout=out.text(), stderr=err.text(), timed_out=ended == "timeout",
                   cancelled=ended == "cancel", seconds=time.monotonic() - started,
                   mode=launch.mode, over_quota=await _quota_note(ws),
                   killed_for_quota=ended == "quota")
