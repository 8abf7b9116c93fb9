"""Code tools: ``run_python`` and ``run_shell``, run in the workspace through ``sandbox``.

Output comes back as exit code, stdout and stderr, each capped (head and tail around a marker).
The model may ask for a timeout up to ``settings.code_timeout_max`` (default
``code_timeout_default``); on timeout or cancel the process group is killed, children included.
The tools are on a menu only while ``sandbox_mode()`` is not ``"disabled"`` (``check_fn``), and
are left out of the untrusted channels by default (``files.UNTRUSTED_CHANNELS``).
"""

from __future__ import annotations

import shutil

from tool_registry import function
from tool_registry.builtin._proc import run_process
from tool_registry.builtin.files import UNTRUSTED_CHANNELS
from tool_registry.builtin.sandbox import code_tools_available
from tool_registry.builtin.settings import BuiltinSettings, current, on_configure
from tool_registry.builtin.workspace import workspace_for
from tool_registry.types import ToolContext, ToolResult

LOOP_TIMEOUT_SLACK = 15.0
"""Seconds the loop's own per-tool timeout stays above ``code_timeout_max``: the tool times
out first and still reports the output it collected."""


def effective_timeout(asked: float | None) -> float:
    """The model's timeout, defaulted and clamped to the operator's maximum."""
    settings = current()
    if asked is None:
        return min(settings.code_timeout_default, settings.code_timeout_max)
    if asked <= 0:
        raise ValueError("timeout must be a positive number of seconds")
    return min(asked, settings.code_timeout_max)


async def _run(command: list[str], ctx: ToolContext, asked: float | None,
               stdin: bytes | None = None) -> ToolResult:
    limit = effective_timeout(asked)
    ws = workspace_for(ctx)
    outcome = await run_process(command, ws, time_limit=limit, progress=ctx.progress,
                                cancel=ctx.cancel, stdin=stdin)
    return ToolResult.text(outcome.report(limit), details=outcome.details(),
                           is_error=outcome.failed)


@function(unsafe_in=UNTRUSTED_CHANNELS, check_fn=code_tools_available)
async def run_shell(command: str, ctx: ToolContext,
                    timeout: float | None = None) -> ToolResult:  # noqa: ASYNC109 (model-facing)
    """Run a shell command (bash) in the workspace; returns exit code, stdout and stderr.

    No network. Background processes are killed when the command ends.

    Args:
        command: The command line, run with `bash -c`.
        timeout: Seconds before the command is killed (default 60; capped by the server).
    """
    shell = "/bin/bash" if shutil.which("bash") else "/bin/sh"
    return await _run([shell, "-c", command], ctx, timeout)


@function(unsafe_in=UNTRUSTED_CHANNELS, check_fn=code_tools_available)
async def run_python(code: str, ctx: ToolContext,
                     timeout: float | None = None) -> ToolResult:  # noqa: ASYNC109 (model-facing)
    """Run a Python 3 program in the workspace; returns exit code, stdout and stderr.

    Print what you want to see. No network; only the standard library is guaranteed.

    Args:
        code: The program's source, run as a script.
        timeout: Seconds before the program is killed (default 60; capped by the server).
    """
    return await _run([current().python, "-"], ctx, timeout, stdin=code.encode("utf-8"))


def _sync_loop_timeouts(settings: BuiltinSettings) -> None:
    for tool in (run_shell, run_python):
        tool.options.timeout = settings.code_timeout_max + LOOP_TIMEOUT_SLACK


on_configure(_sync_loop_timeouts)
