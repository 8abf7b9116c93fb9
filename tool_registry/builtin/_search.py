"""``list_files`` and ``search_files``: looking around the workspace without leaving it.

Neither follows a symlink into a directory; entries whose real location is outside the
workspace are not listed or searched. Results are capped with a note of how many were left out.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from tool_registry import function
from tool_registry.builtin import workspace as wsmod
from tool_registry.builtin.files import read_bytes
from tool_registry.builtin.settings import current
from tool_registry.types import ToolContext

MAX_ENTRIES = 1000
"""Paths list_files returns at most."""
MAX_MATCHES = 200
"""Matching lines search_files shows at most."""
MAX_MATCH_LINE = 400
"""Characters of a matching (or context) line shown."""


def _check_pattern(pattern: str) -> None:
    parts = PurePosixPath(pattern).parts
    if pattern.startswith("/") or ".." in parts:
        raise wsmod.OutsideWorkspace(
            f"pattern {pattern!r} must be relative to the workspace and must not contain '..'")


def _inside(ws: Path, path: Path) -> bool:
    return path.resolve(strict=False).is_relative_to(ws) or path.is_symlink()


@function
def list_files(ctx: ToolContext, pattern: str = "**/*") -> str:
    """List files and directories in the workspace matching a glob (directories end in '/').

    Args:
        pattern: Glob relative to the workspace, e.g. "**/*.py" or "src/*".
    """
    _check_pattern(pattern)
    ws = wsmod.workspace_for(ctx)
    found: list[str] = []
    for path in ws.glob(pattern):
        if not path.is_relative_to(ws) or not _inside(ws, path):
            continue
        name = wsmod.display(ws, path)
        found.append(name + "/" if path.is_dir() and not path.is_symlink() else name)
        if len(found) > MAX_ENTRIES * 10:
            break
    if not found:
        return f"no files match {pattern!r}"
    found.sort()
    shown = found[:MAX_ENTRIES]
    note = f"\n[{len(found) - len(shown)} more not shown]" if len(found) > len(shown) else ""
    return "\n".join(shown) + note


def _wanted(rel: str, glob: str) -> bool:
    if "/" not in glob:
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], glob)
    return (fnmatch.fnmatchcase(rel, glob)
            or (glob.startswith("**/") and fnmatch.fnmatchcase(rel, glob[3:])))


def _walk(ws: Path, root: Path, glob: str) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for fname in sorted(filenames):
            path = Path(dirpath) / fname
            if not path.is_symlink() and _wanted(wsmod.display(ws, path), glob):
                yield path


def _line(text: str) -> str:
    return text if len(text) <= MAX_MATCH_LINE else text[:MAX_MATCH_LINE] + "…"


def _matches_in(name: str, lines: list[str], regex: re.Pattern[str]) -> Iterator[str]:
    for i, line in enumerate(lines):
        if regex.search(line):
            before = f"{name}-{i}- {_line(lines[i - 1])}\n" if i > 0 else ""
            after = f"\n{name}-{i + 2}- {_line(lines[i + 1])}" if i + 1 < len(lines) else ""
            yield f"{before}{name}:{i + 1}: {_line(line)}{after}"


@function
def search_files(pattern: str, ctx: ToolContext, path: str = ".", glob: str = "*") -> str:
    """Search file contents with a regular expression; shows matches with line numbers.

    Args:
        pattern: Python regular expression, matched against each line.
        path: File or directory to search, relative to the workspace.
        glob: Only files whose name (or relative path, if it has a '/') matches this glob.
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
    ws = wsmod.workspace_for(ctx)
    root = wsmod.resolve_in(ws, path)
    shown: list[str] = []
    total = 0
    for file in _walk(ws, root, glob):
        try:
            if file.stat().st_size > current().file_size_cap:
                continue
            data = read_bytes(ws, file)
        except (OSError, ValueError):
            continue  # vanished, unreadable or swapped for something else meanwhile
        if b"\x00" in data[:8192]:
            continue
        lines = data.decode("utf-8", "replace").splitlines()
        for hit in _matches_in(wsmod.display(ws, file), lines, regex):
            total += 1
            if len(shown) < MAX_MATCHES:
                shown.append(hit)
    if not total:
        return f"no matches for {pattern!r}"
    note = f"\n[{total - len(shown)} more matches not shown]" if total > len(shown) else ""
    return "\n--\n".join(shown) + note
