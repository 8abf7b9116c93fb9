"""Fixtures for the built-in tools: a real workspace the sandbox uid can reach, and settings."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tool_registry import ToolContext, ToolResult
from tool_registry.builtin import sandbox
from tool_registry.builtin import settings as settings_mod
from tool_registry.builtin.sandbox import sandbox_mode


@pytest.fixture
def base() -> Iterator[Path]:
    """A scratch dir under the system temp dir (pytest's tmp_path is 0700: bwrap, running as
    the sandbox uid, could not bind a workspace below it)."""
    path = Path(tempfile.mkdtemp(prefix="agentloop-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def configure(base: Path) -> Iterator[Any]:
    """``configure(**changes)`` applies settings for one test; restored afterwards. A start-up
    probe recorded by an earlier test's app in this process (a server whose workspace the
    sandbox could not reach records a failed one: code tools ``disabled``) is set aside too."""
    saved = settings_mod.current()
    saved_probe = sandbox.probe_result()
    sandbox.record_probe(None)

    def apply(**changes: Any) -> settings_mod.BuiltinSettings:
        new = dataclasses.replace(settings_mod.current(), **changes)
        settings_mod.configure(new)
        return new

    apply(workspace_root=base / "workspaces", unsafe_code_tools=True)
    yield apply
    settings_mod.configure(saved)
    sandbox.record_probe(saved_probe)


@pytest.fixture
def ws(base: Path, configure: Any) -> Path:
    path = base / "ws"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def outside(base: Path) -> Path:
    """A directory beside the workspace, holding a file the tools must never touch."""
    path = base / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret\n")
    return path


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext(run_id="run-test", tool_call_id="call-1", workspace=ws)


async def call(tool: Any, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Call a tool the way the loop does (validated args; exceptions become is_error)."""
    try:
        return await tool.execute(tool.validate(args), ctx)
    except Exception as exc:
        return ToolResult.text(f"{type(exc).__name__}: {exc}", is_error=True)


def text(result: ToolResult) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


needs_bwrap = pytest.mark.skipif(
    sandbox_mode() != "bubblewrap",
    reason="bubblewrap is not usable here (apt-get install -y bubblewrap); the sandbox-only "
           "assertions cannot hold without it")

MODES = ["bubblewrap", "unsafe"]


@pytest.fixture(params=MODES)
def mode(request, monkeypatch, configure):
    """Each test runs in both modes (bubblewrap skipped where unusable)."""
    if request.param == "bubblewrap" and sandbox.sandbox_mode() != "bubblewrap":
        pytest.skip("bubblewrap is not usable here (apt-get install -y bubblewrap)")
    if request.param == "unsafe":
        monkeypatch.setattr(sandbox, "bwrap_usable", lambda: False)
    assert sandbox.sandbox_mode() == request.param
    return request.param


ROOT = os.geteuid() == 0


def exists(path: str | Path) -> bool:
    """Whether ``path`` exists (a sync helper: asserting in async tests is fine)."""
    return os.path.lexists(path)
