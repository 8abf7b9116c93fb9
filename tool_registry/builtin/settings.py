"""Settings of the built-in tools, set once at start-up without importing the service.

The service's config (the only reader of the environment) calls ``configure(...)``; the tools
read ``current()`` on every call, so a test may ``configure`` its own. Environment mapping done by
``app/config.py``:

- ``AGENTLOOP_WORKSPACE_ROOT``       → ``workspace_root``
- ``AGENTLOOP_WORKSPACE``            → ``shared_workspace`` (one workspace for every run)
- ``AGENTLOOP_UNSAFE_CODE_TOOLS``    → ``unsafe_code_tools``
- ``AGENTLOOP_CODE_TIMEOUT_MAX``     → ``code_timeout_max``
- ``AGENTLOOP_FETCH_ALLOW_PRIVATE``  → ``fetch_allow_private``
- ``AGENTLOOP_WORKSPACE_MAX_BYTES``  → ``workspace_max_bytes``

Listeners registered with ``on_configure`` are called after each ``configure`` (the code tools
use it to keep the loop's per-tool timeout above ``code_timeout_max``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1024 * 1024


def _default_root() -> Path:
    return Path(tempfile.gettempdir()) / "agentloop-workspaces"


@dataclass(frozen=True, slots=True, kw_only=True)
class BuiltinSettings:
    """Operator knobs of the built-in tools (one line each; defaults are safe)."""

    workspace_root: Path = field(default_factory=_default_root)
    """Each run works in ``workspace_root/<run_id>`` (created on first use)."""
    shared_workspace: Path | None = None
    """If set, every run shares this one workspace instead."""
    unsafe_code_tools: bool = False
    """Offer run_python/run_shell even when bubblewrap is unusable (no sandbox but limits)."""
    code_timeout_max: float = 300.0
    """Ceiling on the timeout a model may ask of run_python/run_shell, seconds."""
    code_timeout_default: float = 60.0
    """Timeout of run_python/run_shell when the model asks none, seconds."""
    output_cap_chars: int = 32_000
    """Characters of a tool's text output kept (head and tail, with a marker between)."""
    file_size_cap: int = 10 * MiB
    """Largest file the file tools read, write or edit, bytes."""
    workspace_max_bytes: int = 1024 * MiB
    """Size cap of one workspace (``quota``: what is guaranteed), bytes; 0 = none."""
    tmp_size_mb: int = 256
    """Size of the sandbox's private ``/tmp`` (a tmpfs: memory), MiB."""
    fetch_allow_private: bool = False
    """Let http_fetch reach loopback, private, link-local and metadata addresses."""
    fetch_max_bytes: int = 2 * MiB
    """Bytes of a response body http_fetch reads before stopping."""
    fetch_timeout: float = 20.0
    """Seconds one http_fetch may take, redirects included."""
    cpu_seconds: int = 300
    """RLIMIT_CPU of a code process."""
    address_space_mb: int = 2048
    """RLIMIT_AS of a code process, MiB."""
    file_size_mb: int = 512
    """RLIMIT_FSIZE of a code process, MiB."""
    max_processes: int = 128
    """RLIMIT_NPROC of a code process (counted per uid: see ``sandbox``)."""
    sandbox_uid: int = 65534
    """Uid (and gid) code runs as when the service runs as root; the workspace is chowned to it."""
    python: str = "python3"
    """Interpreter run_python starts, looked up on the sandbox's PATH."""


_current = BuiltinSettings()
_configured = False
_listeners: list[Callable[[BuiltinSettings], None]] = []


def configure(settings: BuiltinSettings) -> None:
    """Make ``settings`` current for every later tool call."""
    global _current, _configured
    _current = settings
    _configured = True
    for listener in _listeners:
        listener(settings)


def configured() -> bool:
    """Whether anyone called ``configure`` (else the defaults are in force)."""
    return _configured


def current() -> BuiltinSettings:
    """The settings in force."""
    return _current


def on_configure(listener: Callable[[BuiltinSettings], None]) -> None:
    """Call ``listener`` now and after every ``configure``."""
    _listeners.append(listener)
    listener(_current)
