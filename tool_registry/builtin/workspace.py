"""Where a run's files live, and the one gate every file-tool path goes through.

A run works in ``ctx.workspace`` if the loop set one, else the operator's shared workspace, else
``workspace_root/<run_id>``; it is created on first use. ``resolve_in`` resolves a path the model
gave (``..``, absolute paths and symlinks included) and refuses anything that lands outside the
workspace. ``open_beneath`` then opens the resolved path one component at a time with
``O_NOFOLLOW``, so a symlink swapped in after the check (say by ``run_shell``) fails the open
instead of being followed.

When the service runs as root, code runs as ``settings.sandbox_uid``: the workspace directory and
everything the file tools create in it are chowned to that uid so code can modify them.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from tool_registry.builtin.settings import current
from tool_registry.types import ToolContext

_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")


class OutsideWorkspace(PermissionError):
    """A path resolved to somewhere outside the run's workspace."""


def workspace_for(ctx: ToolContext) -> Path:
    """The run's workspace, created (and handed to the sandbox uid) if missing."""
    settings = current()
    if ctx.workspace is not None:
        ws = ctx.workspace
    elif settings.shared_workspace is not None:
        ws = settings.shared_workspace
    else:
        run_dir = _UNSAFE_ID.sub("_", ctx.run_id).lstrip(".") or "_anonymous"
        ws = settings.workspace_root / run_dir
    ws.mkdir(parents=True, exist_ok=True)
    give_to_sandbox(ws)
    return ws.resolve()


def give_to_sandbox(path: Path | int) -> None:
    """Chown a path (or open fd) to the sandbox uid when we are root; a no-op otherwise."""
    if os.geteuid() != 0:
        return
    uid = current().sandbox_uid
    if isinstance(path, int):
        os.fchown(path, uid, uid)
    elif path.stat().st_uid != uid:
        os.chown(path, uid, uid, follow_symlinks=False)


def resolve_in(ws: Path, user_path: str) -> Path:
    """``user_path`` (relative to the workspace or absolute) resolved; refused if outside."""
    if "\x00" in user_path:
        raise ValueError("path contains a NUL byte")
    target = (ws / user_path).resolve(strict=False)
    if not target.is_relative_to(ws):
        raise OutsideWorkspace(
            f"path {user_path!r} resolves to {target}, outside the workspace; "
            "use a path inside the workspace")
    return target


def display(ws: Path, path: Path) -> str:
    """A path as the model should see it: relative to the workspace."""
    rel = path.relative_to(ws)
    return str(rel) if rel.parts else "."


def open_beneath(ws: Path, target: Path, flags: int, *, make_parents: bool = False) -> int:
    """Open ``target`` (already ``resolve_in``-ed) without following any symlink on the way."""
    parts = target.relative_to(ws).parts
    if not parts:
        raise IsADirectoryError("the workspace itself is a directory, not a file")
    dirfd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if make_parents:
                _mkdir_at(part, dirfd)
            nextfd = _open_at(part, dirfd, os.O_RDONLY | os.O_DIRECTORY, ws, target)
            os.close(dirfd)
            dirfd = nextfd
        return _open_at(parts[-1], dirfd, flags, ws, target)
    finally:
        os.close(dirfd)


def _open_at(name: str, dirfd: int, flags: int, ws: Path, target: Path) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dirfd)
    except OSError as exc:
        # O_NOFOLLOW met a symlink (ELOOP; ENOTDIR together with O_DIRECTORY)
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(name, dirfd):
            raise OutsideWorkspace(f"{display(ws, target)}: a symlink is in the way; "
                                   "the file tools do not follow links") from exc
        raise


def _is_link(name: str, dirfd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dirfd).st_mode)
    except OSError:
        return False


def _mkdir_at(name: str, dirfd: int) -> None:
    try:
        os.mkdir(name, 0o755, dir_fd=dirfd)
    except FileExistsError:
        return
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dirfd)
    try:
        give_to_sandbox(fd)
    finally:
        os.close(fd)
