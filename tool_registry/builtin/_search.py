"""``list_files`` and ``search_files``: looking around the workspace without leaving it.

Neither follows a symlink (``_walk``): a name from outside the workspace is never listed and a
file outside it never searched. Results are capped with a note of how many were left out, and
each call's work is bounded (``_walk.Budget``) since a sync tool's thread cannot be stopped.

``search_files`` matches with RE2 (google-re2), whose time is linear in the text searched: no
pattern can stall the service the way a backtracking engine does on ``(a+)+$``. RE2 runs with
the GIL released. Its syntax is Python's minus backreferences and lookaround; a pattern using
them is refused with a message saying so.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import re2

from tool_registry import function
from tool_registry.builtin import workspace as wsmod
from tool_registry.builtin._walk import Budget, GlobMatcher, walk
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


@function
def list_files(ctx: ToolContext, pattern: str = "**/*") -> str:
    """List files and directories in the workspace matching a glob (directories end in '/').

    Args:
        pattern: Glob relative to the workspace, e.g. "**/*.py" or "src/*".
    """
    _check_pattern(pattern)
    matcher = GlobMatcher(pattern)
    ws = wsmod.workspace_for(ctx)
    budget = Budget()
    found: list[str] = []
    for entry in walk(ws, budget, matcher):
        found.append(entry.rel + "/" if entry.is_dir else entry.rel)
    if not found:
        return f"no files match {pattern!r}{budget.note()}"
    found.sort()
    shown = found[:MAX_ENTRIES]
    note = f"\n[{len(found) - len(shown)} more not shown]" if len(found) > len(shown) else ""
    return "\n".join(shown) + note + budget.note()


def compile_pattern(pattern: str) -> Any:
    """``pattern`` as an RE2 regex over UTF-8 bytes, matched line by line (``^``/``$`` at
    line ends, never across a newline); ``ValueError`` naming what RE2 does not support."""
    options = re2.Options()
    options.never_nl = True
    options.log_errors = False
    try:
        return re2.compile(b"(?m)" + pattern.encode("utf-8", "surrogatepass"), options)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(
            f"invalid regular expression {pattern!r}: {detail}. search_files uses RE2 syntax "
            "(like Python's re, but without backreferences such as \\1 and without "
            "lookahead/lookbehind such as (?=...) or (?<!...))") from None


def _wanted(rel: str, glob: str) -> bool:
    if "/" not in glob:
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], glob)
    return (fnmatch.fnmatchcase(rel, glob)
            or (glob.startswith("**/") and fnmatch.fnmatchcase(rel, glob[3:])))


def _files(ws: Path, root: Path, glob: str, budget: Budget) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for entry in walk(root, budget):
        path = root / entry.rel
        if not (entry.is_dir or entry.is_link) and _wanted(wsmod.display(ws, path), glob):
            yield path


def _line(text: bytes) -> str:
    shown = text.decode("utf-8", "replace")
    return shown if len(shown) <= MAX_MATCH_LINE else shown[:MAX_MATCH_LINE] + "…"


def _line_at(data: bytes, start: int) -> tuple[int, int]:
    """(start, end) of the line beginning at ``start`` (end excludes the newline)."""
    end = data.find(b"\n", start)
    return start, len(data) if end < 0 else end


def _hit(name: str, data: bytes, number: int, start: int, end: int) -> str:
    """One match with a line of context either side."""
    before = ""
    if start > 0:
        prev = data.rfind(b"\n", 0, start - 1) + 1
        before = f"{name}-{number - 1}- {_line(data[prev:start - 1])}\n"
    after = ""
    if end < len(data) - 1:
        nstart, nend = _line_at(data, end + 1)
        after = f"\n{name}-{number + 1}- {_line(data[nstart:nend])}"
    return f"{before}{name}:{number}: {_line(data[start:end])}{after}"


def _matching_lines(data: bytes, regex: Any, budget: Budget) -> Iterator[tuple[int, int, int]]:
    """(line number, start, end) of each line with a match: one RE2 search per hit, each
    resuming at the next line, so the work is linear in ``data``."""
    pos, number, counted = 0, 1, 0
    while pos < len(data) and (m := regex.search(data, pos)) is not None:
        start = data.rfind(b"\n", 0, m.start()) + 1
        number += data.count(b"\n", counted, start)
        counted = start
        _, end = _line_at(data, start)
        yield number, start, end
        if budget.spend(0):
            return
        pos = end + 1


def _clean(data: bytes) -> bytes:
    """Valid UTF-8 (bad bytes replaced), as RE2 expects."""
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")


@function
def search_files(pattern: str, ctx: ToolContext, path: str = ".", glob: str = "*") -> str:
    """Search file contents with a regular expression; shows matches with line numbers.

    Args:
        pattern: Regular expression (RE2 syntax: Python's re without backreferences or
            lookaround), matched against each line.
        path: File or directory to search, relative to the workspace.
        glob: Only files whose name (or relative path, if it has a '/') matches this glob.
    """
    regex = compile_pattern(pattern)
    ws = wsmod.workspace_for(ctx)
    root = wsmod.resolve_in(ws, path)
    budget = Budget()
    shown: list[str] = []
    total = 0
    for file in _files(ws, root, glob, budget):
        try:
            if file.stat().st_size > current().file_size_cap:
                continue
            data = read_bytes(ws, file)
        except (OSError, ValueError):
            continue  # vanished, unreadable or swapped for something else meanwhile
        if b"\x00" in data[:8192]:
            continue
        data = _clean(data)
        name = wsmod.display(ws, file)
        for number, start, end in _matching_lines(data, regex, budget):
            total += 1
            if len(shown) < MAX_MATCHES:
                shown.append(_hit(name, data, number, start, end))
        if budget.exhausted:
            break
    if not total:
        return f"no matches for {pattern!r}{budget.note()}"
    note = f"\n[{total - len(shown)} more matches not shown]" if total > len(shown) else ""
    return "\n--\n".join(shown) + note + budget.note()
