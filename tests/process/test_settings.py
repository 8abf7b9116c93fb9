"""``--processes`` / ``AGENTLOOP_PROCESSES``: the values taken, the ones refused, and the cases
refused before any process starts (the memory backend, a port in use)."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings, process_count
from app.process import cli
from app.telemetry.logs import JsonFormatter, TextFormatter
from tests.process.supervised import children_of, is_server_child
from tests.support.live_server import free_port
from tests.support.serve_process import until_up


def _clean_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOOP_")}
    return {**env, **settings}


def _agentloop(*args: str, cwd: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.process.cli", *args], cwd=cwd,
                          env=_clean_env(**settings), capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_count_is_a_whole_number_of_at_least_one_or_auto() -> None:
    assert process_count("1") == 1 and process_count(" 4 ") == 4
    assert process_count("auto") == process_count("AUTO") == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "abc", "1.5", "", "two"):
        with pytest.raises(ValueError, match="at least 1, or auto"):
            process_count(bad)
    assert Settings(processes="Auto").processes == "auto"
    assert Settings().processes == "1"


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_bad_counts_are_refused_in_one_line(value: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as flag:
        cli.main(["serve", "--processes", value])
    assert flag.value.code == 2
    assert f"argument --processes: processes must be a whole number of at least 1, or auto " \
           f"(got '{value}')" in capsys.readouterr().err
    env = _agentloop("serve", cwd=tmp_path, AGENTLOOP_PROCESSES=value)
    assert env.returncode == 1
    assert env.stderr.strip() == (
        "agentloop: invalid settings: AGENTLOOP_PROCESSES: processes must be a whole number of "
        f"at least 1, or auto (got '{value}')")


def test_the_flag_wins_over_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def serve(settings: Settings, **options: Any) -> None:
        asked.append(options["processes"])

    for name, stub in (("serve", serve), ("setup_logging", lambda *a, **k: None),
                       ("check_tool_modules", lambda s: None)):
        monkeypatch.setattr(cli, name, stub)
    monkeypatch.setenv("AGENTLOOP_PROCESSES", "3")
    cli.main(["serve"])
    cli.main(["serve", "--processes", "1"])
    cli.main([])
    assert asked == [3, 1, 3]


def test_more_than_one_process_needs_redis(tmp_path: Path) -> None:
    for done in (_agentloop("serve", "--processes", "2", cwd=tmp_path),
                 _agentloop("serve", cwd=tmp_path, AGENTLOOP_PROCESSES="2")):
        assert done.returncode == 1
        assert done.stderr.strip() == (
            "agentloop serve: 2 processes need Redis (AGENTLOOP_REDIS_URL): with the in-memory "
            "backend a run created in one process is invisible to the others")


def test_a_port_in_use_is_one_error_before_any_process_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _agentloop("serve", "--port", str(port), "--processes", "2", cwd=tmp_path,
                          AGENTLOOP_REDIS_URL="redis://127.0.0.1:1/0")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"agentloop serve: cannot listen on 127.0.0.1:{port}: Address already in use")
    assert "starting" not in done.stderr  # no child was started


def _pinned_with_few_files(core: int) -> None:
    os.sched_setaffinity(0, {core})
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def _open_files_limits(pid: int) -> tuple[str, str]:
    """(soft, hard) of a process's open files, as /proc shows them."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise AssertionError("no open files limit in /proc")


async def test_auto_on_one_core_is_the_single_process_server(tmp_path: Path) -> None:
    """``auto`` counts the cores this process may use: pinned to one, it is today's server
    (no supervisor, no child; the memory backend is fine). Started with a soft limit of 256
    open files, it raised its own to the hard limit (each stream holds a socket)."""
    one_core = min(os.sched_getaffinity(0))
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.process.cli", "serve", "--port", str(port), "--processes",
        "auto", cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env=_clean_env(AGENTLOOP_DEFAULT_MODEL="demo:echo",
                       AGENTLOOP_WORKSPACE_ROOT=str(tmp_path / "ws")),
        preexec_fn=lambda: _pinned_with_few_files(one_core))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await until_up(client, proc, within=120)
            assert (await client.post("/runs", json={"input": "hi"})).status_code == 201
        assert not [kid for kid in children_of(proc.pid) if is_server_child(kid)]
        soft, hard = _open_files_limits(proc.pid)
        assert soft == hard and (hard == "unlimited" or int(hard) > 256), (soft, hard)
    finally:
        proc.terminate()
        await proc.wait()


def test_log_lines_name_their_process_only_when_asked() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    assert '"pid"' not in JsonFormatter().format(record)
    assert f'"pid":{os.getpid()}' in JsonFormatter(pid=True).format(record)
    assert f"[{os.getpid()}]" not in TextFormatter().format(record)
    assert f"[{os.getpid()}] INFO x: hello" in TextFormatter(pid=True).format(record)
