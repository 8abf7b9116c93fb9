"""The start-up probe: one real program run through the code tools' own path.

``bwrap_usable`` only shows that ``bwrap true`` starts. ``probe_code_tools`` runs what
``run_python`` runs (the interpreter, its program on stdin, the limits, the uid drop, the
sandbox) through ``_proc.run_process`` on the running event loop, the one the service uses,
and records what happened. A failed probe turns the mode to ``"disabled"`` (the code tools
leave every menu) and ``/readyz`` and the start-up log show why. Timeline::

    open_services ─ load_tools ─ await probe_code_tools() ─ record ─ serve
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from tool_registry.builtin import sandbox
from tool_registry.builtin._proc import run_process
from tool_registry.builtin.sandbox import ProbeResult
from tool_registry.builtin.settings import current
from tool_registry.builtin.workspace import give_to_sandbox

PROBE_OUTPUT = "agentloop-sandbox-ok"
PROBE_SECONDS = 20.0
"""Time the probe program may take (a cold start on a loaded machine included)."""


def _scratch() -> Path:
    """A fresh directory where run workspaces live (same filesystem, same mounts)."""
    settings = current()
    root = settings.workspace_root
    root.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=".probe-", dir=root))
    path.chmod(0o755)
    give_to_sandbox(path)
    return path


async def _run_probe(mode: sandbox.SandboxMode) -> ProbeResult:
    started = time.monotonic()
    ws = _scratch()
    try:
        outcome = await run_process([current().python, "-"], ws, time_limit=PROBE_SECONDS,
                                    progress=lambda _: None, cancel=asyncio.Event(),
                                    stdin=f"print({PROBE_OUTPUT!r})".encode())
    finally:
        shutil.rmtree(ws, ignore_errors=True)
    took = time.monotonic() - started
    if outcome.exit_code == 0 and outcome.stdout.strip() == PROBE_OUTPUT:
        return ProbeResult(ok=True, mode=mode, detail="a sandboxed python printed its line",
                           seconds=took)
    why = "timed out" if outcome.timed_out else f"exit code {outcome.exit_code}"
    return ProbeResult(ok=False, mode=mode, seconds=took,
                       detail=f"{why}: {(outcome.stderr or outcome.stdout).strip()[-500:]}")


_last: tuple[tuple[object, ...], ProbeResult] | None = None


def _key(mode: sandbox.SandboxMode) -> tuple[object, ...]:
    settings = current()
    return (mode, settings.python, settings.sandbox_uid, settings.workspace_root)


async def probe_code_tools(*, fresh: bool = False) -> ProbeResult:
    """Run the probe (unless the code tools are off anyway), record and return the result.
    A process that opens its services again with the same settings (tests) reuses the
    result it has unless ``fresh``."""
    global _last
    sandbox.record_probe(None)
    mode = sandbox.sandbox_mode()
    if not fresh and _last is not None and _last[0] == _key(mode):
        sandbox.record_probe(_last[1])
        return _last[1]
    if mode == "disabled":
        result = ProbeResult(ok=False, mode=mode, seconds=0.0,
                             detail="not run: bubblewrap is not usable and unsafe code tools "
                                    "are off")
    else:
        try:
            result = await _run_probe(mode)
        except Exception as exc:  # the spawn itself failed: that is the finding
            result = ProbeResult(ok=False, mode=mode, seconds=0.0,
                                 detail=f"{type(exc).__name__}: {exc}")
    sandbox.record_probe(result)
    _last = (_key(mode), result)
    return result


def forget() -> None:
    """Drop the remembered result and the recorded one (tests)."""
    global _last
    _last = None
    sandbox.record_probe(None)
