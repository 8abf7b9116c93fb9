"""The workspace size cap (``settings.workspace_max_bytes``; 0 = no cap).

Usage is what ``du`` counts: the allocated blocks (``st_blocks * 512``) of every entry under
the workspace, symlinks not followed. What is guaranteed:

- ``write_file`` and ``edit_file`` write nothing and fail with ``WorkspaceFull`` (a tool error
  saying how much is used) when the workspace would pass the cap after the write.
- ``run_python`` and ``run_shell`` always start (so a full workspace can still be cleaned up),
  with every file they write capped at the space left when they start (``RLIMIT_FSIZE``; none
  at all when nothing is left). While they run, the workspace is measured every
  ``WATCH_SECONDS`` and the process group is killed as soon as usage passes the cap. So the
  overshoot is at most what the code writes in one interval (plus the time one measurement
  takes); when the code ends with the workspace over the cap, the result is an error saying
  so, and the file tools refuse to write until files are removed. Code started in a workspace
  already over the cap may write nothing but may remove files (it is not killed for that).
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from tool_registry.builtin.settings import current

WATCH_SECONDS = 0.25
"""How often a running code process's workspace is measured."""


class WorkspaceFull(OSError):
    """A write would take the workspace past its size cap."""


def usage(ws: Path) -> int:
    """Bytes allocated under ``ws`` (directories included), symlinks not followed."""
    total = 0
    for _, dirnames, filenames, dirfd in os.fwalk(ws, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                total += os.lstat(name, dir_fd=dirfd).st_blocks * 512
            except OSError:
                continue  # removed meanwhile
    return total


def _allocated(path: Path) -> int:
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    return info.st_blocks * 512 if stat.S_ISREG(info.st_mode) else 0


def full_message(used: int, cap: int) -> str:
    """What the model reads when the workspace is full."""
    return (f"the workspace is full: {used} bytes used of its {cap}-byte limit; delete files "
            "you no longer need (e.g. run_shell 'rm ...') and try again")


def ensure_room(ws: Path, target: Path, size: int) -> None:
    """Refuse (``WorkspaceFull``) to write ``size`` bytes to ``target`` past the cap."""
    cap = current().workspace_max_bytes
    if not cap:
        return
    used = usage(ws)
    after = used - _allocated(target) + size
    if after > cap:
        raise WorkspaceFull(full_message(used, cap) + f" ({size} more bytes were asked for)")


def room(ws: Path) -> int | None:
    """Bytes left under the cap (never negative), or None when there is no cap."""
    cap = current().workspace_max_bytes
    return max(cap - usage(ws), 0) if cap else None


async def watch(ws: Path, cap: int) -> int:
    """Return the usage once it passes ``cap`` (measured off the event loop)."""
    while True:
        used = await asyncio.to_thread(usage, ws)
        if used > cap:
            return used
        await asyncio.sleep(WATCH_SECONDS)
