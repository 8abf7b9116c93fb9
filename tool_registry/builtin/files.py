"""File tools: read, write and edit files in the run's workspace.

Every path goes through ``workspace.resolve_in`` (refused if it lands outside the workspace,
symlinks included) and is opened with ``workspace.open_beneath`` (no symlink followed). Files
larger than ``settings.file_size_cap`` are refused, and so is a write that would take the
workspace past ``settings.workspace_max_bytes`` (``quota``); text sent back is capped at
``settings.output_cap_chars`` with a note saying how to page on. ``list_files`` and
``search_files`` live in ``_search.py`` and join the same toolsets.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tool_registry import function
from tool_registry.builtin import quota
from tool_registry.builtin import workspace as wsmod
from tool_registry.builtin._limits import cap_text
from tool_registry.builtin.settings import current
from tool_registry.types import ToolContext

UNTRUSTED_CHANNELS = ("web", "public")
"""``tools_source`` channels where tools that change things are left out by default: ``web``
(a browser frontend's end users) and ``public`` (anonymous callers). ``api`` keeps them."""

MAX_LINE_CHARS = 2000
"""A longer line is cut (with a marker) when read_file shows it."""


def read_bytes(ws: Path, target: Path) -> bytes:
    """A regular file's bytes (refusing directories, devices, FIFOs and oversize files)."""
    fd = wsmod.open_beneath(ws, target, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        name = wsmod.display(ws, target)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(f"{name} is a directory; use list_files")
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{name} is not a regular file")
        cap = current().file_size_cap
        if info.st_size > cap:
            raise ValueError(f"{name} is {info.st_size} bytes, over the {cap}-byte limit")
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(cap + 1)
    finally:
        os.close(fd)


def write_bytes(ws: Path, target: Path, data: bytes) -> None:
    """Create or replace a regular file (parents created), never through a symlink."""
    cap = current().file_size_cap
    if len(data) > cap:
        raise ValueError(f"content is {len(data)} bytes, over the {cap}-byte limit")
    quota.ensure_room(ws, target, len(data))
    fd = wsmod.open_beneath(ws, target,
                            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK,
                            make_parents=True)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{wsmod.display(ws, target)} is not a regular file")
        wsmod.give_to_sandbox(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _numbered(lines: list[str], first: int, cap: int) -> tuple[str, int]:
    """Lines with numbers, stopping before ``cap`` characters; returns (text, lines shown)."""
    out: list[str] = []
    size = 0
    for i, line in enumerate(lines, start=first):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f"… [line cut at {MAX_LINE_CHARS} characters]"
        row = f"{i:6}\t{line}"
        size += len(row) + 1
        if out and size > cap:
            break
        out.append(row)
    return "\n".join(out), len(out)


@function
def read_file(path: str, ctx: ToolContext, offset: int = 1, limit: int = 2000) -> str:
    """Read a text file from the workspace, with line numbers.

    Args:
        path: File path, relative to the workspace.
        offset: First line to show (1-based).
        limit: Most lines to show; page on with a larger offset.
    """
    ws = wsmod.workspace_for(ctx)
    target = wsmod.resolve_in(ws, path)
    data = read_bytes(ws, target)
    if b"\x00" in data[:8192]:
        return f"{path}: binary file, {len(data)} bytes (not shown)"
    lines = data.decode("utf-8", "replace").splitlines()
    start = max(offset, 1)
    chosen = lines[start - 1: start - 1 + max(limit, 1)]
    if not chosen:
        return f"{path}: {len(lines)} lines; nothing at offset {start}"
    body, shown = _numbered(chosen, start, current().output_cap_chars)
    last = start + shown - 1
    if last < len(lines):
        body += (f"\n[lines {start}-{last} of {len(lines)}; "
                 f"call again with offset={last + 1} for more]")
    return body


@function(unsafe_in=UNTRUSTED_CHANNELS)
def write_file(path: str, content: str, ctx: ToolContext) -> str:
    """Create or overwrite a file in the workspace (missing parent directories are created).

    Args:
        path: File path, relative to the workspace.
        content: The whole new content of the file.
    """
    ws = wsmod.workspace_for(ctx)
    target = wsmod.resolve_in(ws, path)
    data = content.encode("utf-8")
    write_bytes(ws, target, data)
    return f"wrote {len(data)} bytes to {wsmod.display(ws, target)}"


@function(unsafe_in=UNTRUSTED_CHANNELS)
def edit_file(path: str, old: str, new: str, ctx: ToolContext,
              replace_all: bool = False) -> str:
    """Replace exact text in a file. ``old`` must match exactly once unless replace_all is set.

    Args:
        path: File path, relative to the workspace.
        old: The exact text to replace (whitespace and indentation included).
        new: The replacement text.
        replace_all: Replace every occurrence instead of requiring exactly one.
    """
    if not old:
        raise ValueError("old must not be empty")
    ws = wsmod.workspace_for(ctx)
    target = wsmod.resolve_in(ws, path)
    name = wsmod.display(ws, target)
    text = read_bytes(ws, target).decode("utf-8", "surrogateescape")
    count = text.count(old)
    if count == 0:
        raise ValueError(f"old text not found in {name} (0 matches); read the file and copy "
                         "the text exactly")
    if count > 1 and not replace_all:
        raise ValueError(f"old text matches {count} times in {name}; include more surrounding "
                         "context to make it unique, or pass replace_all=true")
    updated = text.replace(old, new)
    write_bytes(ws, target, updated.encode("utf-8", "surrogateescape"))
    return cap_text(f"replaced {count} occurrence(s) in {name}", current().output_cap_chars)
