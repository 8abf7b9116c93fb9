"""Code tools with real processes: scrubbed env, no network, no escape, nothing left running."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tools.conftest import ROOT, call, exists, needs_bwrap, text
from tool_registry import ToolContext, build_menu
from tool_registry.builtin import _proc, sandbox
from tool_registry.builtin.code import run_python, run_shell


def alive(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                pids.append(int(entry))
    return pids


def unique_sleep() -> str:
    return f"{1000 + (time.monotonic_ns() % 10**6) / 10**6:.6f}"


async def test_environment_is_scrubbed(mode, ctx, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("AGENTLOOP_REDIS_URL", "redis://planted")
    service = f"/proc/{os.getpid()}/environ"  # the service's own environment: not readable
    result = await call(run_shell, {"command": f"env; cat {service} /proc/1/environ; true"}, ctx)
    assert "exit code: 0" in text(result)
    assert "sk-planted" not in text(result) and "planted" not in text(result)
    assert f"HOME={ctx.workspace}" in text(result)
    py = await call(run_python, {"code": "import os; print(sorted(os.environ))"}, ctx)
    assert "OPENAI_API_KEY" not in text(py) and "PATH" in text(py)


@needs_bwrap
async def test_no_network_under_bwrap(ctx):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2)\n"
                "    print('CONNECTED')\nexcept OSError as e:\n    print('refused', e)")
        result = await call(run_python, {"code": code}, ctx)
    assert "refused" in text(result) and "CONNECTED" not in text(result)


@needs_bwrap
async def test_cannot_write_outside_under_bwrap(ctx, outside):
    planted = f"/tmp/agentloop-pwn-{os.getpid()}"
    cmd = (f"echo x > {outside}/pwn; echo x > {planted}; touch /usr/pwn /etc/pwn; "
           f"echo y > {outside}/secret.txt; echo inside > ok.txt")
    result = await call(run_shell, {"command": cmd}, ctx)
    assert not result.is_error, text(result)
    assert (ctx.workspace / "ok.txt").read_text() == "inside\n"
    for path in (f"{outside}/pwn", planted, "/usr/pwn", "/etc/pwn"):
        assert not exists(path), path
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_timeout_kills_the_group_children_included(mode, ctx):
    marker = unique_sleep()
    started = time.monotonic()
    result = await call(run_shell, {"command": f"sleep {marker} & sleep {marker}; echo never",
                                    "timeout": 1}, ctx)
    assert time.monotonic() - started < 5
    assert result.is_error and "timed out after 1 s" in text(result)
    assert await gone(marker) == []


async def test_background_child_does_not_outlive_the_command(mode, ctx):
    marker = unique_sleep()
    result = await call(run_shell, {"command": f"sleep {marker} & echo started"}, ctx)
    assert "started" in text(result)
    assert await gone(marker) == []


async def gone(marker: str, within: float = 10.0) -> list[int]:
    """Wait (up to ``within`` s: a PID namespace takes a moment to reap under load) until no
    process carries ``marker``; returns those still alive."""
    deadline = time.monotonic() + within
    while (left := alive(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


def _first_argument(pid: int) -> int | None:
    """The first argument of the system call ``pid`` sits in (None when it runs or is gone)."""
    try:
        return int(Path(f"/proc/{pid}/syscall").read_text().split()[1], 16)
    except (OSError, IndexError, ValueError):
        return None


async def _blocked_on(marker: str, fd: int, besides: int) -> None:
    """Wait until a process carrying ``marker`` (other than ``besides``) sits in a system call
    on descriptor ``fd`` (``/proc/PID/syscall``: the number, then the arguments)."""
    for _ in range(300):
        if any(pid != besides and _first_argument(pid) == fd for pid in alive(marker)):
            return
        await asyncio.sleep(0.03)
    raise AssertionError("bwrap's sandbox never reached its --block-fd")


async def _wait_alive(marker: str) -> None:
    for _ in range(100):
        if alive(marker):
            return
        await asyncio.sleep(0.03)
    raise AssertionError("the command never started")


async def test_task_cancel_kills_the_group(mode, ctx):
    marker = unique_sleep()
    task = asyncio.create_task(
        call(run_shell, {"command": f"sleep {marker} & sleep {marker}"}, ctx))
    await _wait_alive(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(marker) == []


async def test_cancel_while_the_spawn_completes_kills_what_started(mode, ctx, monkeypatch):
    """The program runs before create_subprocess_exec returns; a cancel landing then (the
    loop still connecting pipes, slow under load) must not leave it running."""
    real = asyncio.create_subprocess_exec
    spawned = asyncio.Event()

    async def slow_spawn(*args, **kwargs):
        proc = await real(*args, **kwargs)
        spawned.set()
        await asyncio.sleep(1.0)  # pipes still connecting when the cancel arrives
        return proc

    monkeypatch.setattr(_proc.asyncio, "create_subprocess_exec", slow_spawn)
    marker = unique_sleep()
    task = asyncio.create_task(
        call(run_shell, {"command": f"sleep {marker} & sleep {marker}"}, ctx))
    await asyncio.wait_for(spawned.wait(), 10)
    await _wait_alive(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(marker) == []


@needs_bwrap
async def test_the_group_kill_reaches_a_sandbox_whose_bwrap_died_first(ctx):
    """bwrap killed before its sandbox finished starting (a cancel landing early, under load):
    the sandbox goes on without a parent-death signal, so ``kill_group`` alone must reach it,
    processes that called ``setsid`` included. bwrap is held at ``--block-fd`` (after its
    clone, before the sandbox's init starts the command) while only bwrap is killed."""
    marker = unique_sleep()
    launch = sandbox.prepare(["sh", "-c", f"setsid sleep {marker} & sleep {marker}"],
                             ctx.workspace)
    held, release = os.pipe()
    at = launch.argv.index("bwrap") + 1
    argv = [*launch.argv[:at], "--block-fd", str(held), *launch.argv[at:]]
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=ctx.workspace, env=launch.env, start_new_session=True, pass_fds=(held,),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    os.close(held)
    try:
        await _blocked_on(marker, held, besides=proc.pid)
        os.kill(proc.pid, signal.SIGKILL)  # bwrap alone; its sandbox is still setting up
        await asyncio.wait_for(proc.wait(), 10)
        os.write(release, b"x")  # the orphaned sandbox starts the command
        for _ in range(300):
            if len(alive(marker)) >= 3:  # the init and both sleeps
                break
            await asyncio.sleep(0.03)
        assert len(alive(marker)) >= 3, "the orphaned sandbox never started the command"
        _proc.kill_group(proc.pid)
        assert await gone(marker) == []
    finally:
        os.close(release)
        for pid in alive(marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


TERMINAL_SCRIPT = r"""
import json, os, sys
from pathlib import Path
import uvloop
os.close(os.open(sys.argv[2], os.O_RDWR))  # a session leader opening a tty: its terminal now
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
    service_has_one = True
except OSError:
    service_has_one = False
from tool_registry import ToolContext
from tool_registry.builtin import sandbox, settings
from tool_registry.builtin.code import run_shell
if sys.argv[3] == "unsafe":
    sandbox.bwrap_usable = lambda: False
settings.configure(settings.BuiltinSettings(workspace_root=Path(sys.argv[1]),
                                            unsafe_code_tools=True))

async def main():
    result = await run_shell.execute({"command": "cut -d' ' -f7 /proc/self/stat; "
                                      "(: </dev/tty) 2>/dev/null && echo TTY || echo NO-TTY"},
                                     ToolContext(run_id="tty-run", tool_call_id="c1"))
    print(json.dumps({"service": service_has_one, "mode": sandbox.sandbox_mode(),
                      "code": result.content[0].text}))

uvloop.run(main())  # the loop agentloop serve runs: uvloop spawns with libuv, not asyncio
"""


def test_code_has_no_terminal_when_the_service_has_one(mode, base):
    """Code never gets the service's controlling terminal (no ``TIOCSTI`` into it): every
    spawn has a session of its own (``start_new_session``), in both modes; under bubblewrap
    this is what ``--new-session`` was for."""
    parent, child = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", TERMINAL_SCRIPT, str(base / "workspaces"),
             os.ttyname(child), mode],
            start_new_session=True, capture_output=True, text=True, timeout=60, check=False,
            cwd=Path(__file__).resolve().parents[2])
    finally:
        os.close(parent)
        os.close(child)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["service"] is True and seen["mode"] == mode  # the check means something
    assert seen["code"].splitlines()[:4] == ["exit code: 0", "--- stdout ---", "0", "NO-TTY"], seen


async def test_run_cancel_signal_kills_the_group(mode, ctx):
    marker = unique_sleep()
    task = asyncio.create_task(call(run_python, {
        "code": f"import subprocess\nsubprocess.run(['sleep', '{marker}'])"}, ctx))
    await _wait_alive(marker)
    ctx.cancel.set()
    result = await asyncio.wait_for(task, 5)
    assert result.is_error and "cancelled" in text(result)
    assert alive(marker) == []


async def test_huge_output_is_capped_in_bounded_memory(mode, ctx, configure):
    configure(output_cap_chars=10_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    result = await call(run_shell, {"command": "head -c 100000000 /dev/zero | tr '\\0' a; "
                                               "echo; echo THE-END"}, ctx)
    assert time.monotonic() - started < 10
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 50 * 1024
    out = text(result)
    assert "exit code: 0" in out and "bytes omitted" in out and out.rstrip().endswith("THE-END")
    assert len(out) < 11_000


@pytest.mark.skipif(not ROOT, reason="the uid drop that makes RLIMIT_NPROC bite needs root")
async def test_fork_bomb_is_contained(mode, ctx, configure):
    configure(max_processes=64)
    started = time.monotonic()
    result = await call(run_shell, {"command": "b(){ b | b & }; b; sleep 100", "timeout": 2},
                        ctx)
    assert time.monotonic() - started < 15
    assert result.is_error and "timed out" in text(result)
    uid = str(sandbox.current().sandbox_uid)
    for _ in range(100):  # a PID namespace of a few dozen processes takes a moment to reap
        left = [p for p in os.listdir("/proc") if p.isdigit() and _uid_of(p) == uid
                and _cwd_of(p).startswith(str(ctx.workspace))]  # not other suites' processes
        if not left:
            break
        await asyncio.sleep(0.05)
    assert left == []
    after = await call(run_shell, {"command": "echo still-fine"}, ctx)
    assert "still-fine" in text(after)


def _cwd_of(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _uid_of(pid: str) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return line.split()[1]
    except OSError:
        return None
    return None


async def test_timeout_is_clamped_to_the_operator_maximum(mode, ctx, configure):
    configure(code_timeout_max=0.5)
    result = await call(run_python, {"code": "import time; time.sleep(30)", "timeout": 100}, ctx)
    assert "timed out after 0.5 s" in text(result)


async def test_python_runs_in_the_workspace(mode, ctx):
    result = await call(run_python, {"code": "import os\nopen('made.txt','w').write('hi')\n"
                                             "print(os.getcwd())\nraise SystemExit(3)"}, ctx)
    assert f"exit code: 3\n--- stdout ---\n{ctx.workspace}" in text(result)
    assert (ctx.workspace / "made.txt").read_text() == "hi"


async def test_disabled_mode_hides_and_refuses(monkeypatch, configure, ctx):
    configure(unsafe_code_tools=False)
    monkeypatch.setattr(sandbox, "bwrap_usable", lambda: False)
    assert sandbox.sandbox_mode() == "disabled"
    names = build_menu().names()
    assert "run_shell" not in names and "run_python" not in names and "read_file" in names
    result = await call(run_shell, {"command": "true"}, ToolContext(workspace=ctx.workspace))
    assert result.is_error and "disabled" in text(result)
