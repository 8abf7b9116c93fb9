"""Walking the workspace for ``list_files`` and ``search_files``: never through a symlink,
never past a budget.

The walk is ``os.fwalk`` from the workspace (or a directory inside it) with symlinks not
followed: a directory is entered through a file descriptor opened beside the one it was listed
from, and one swapped for a symlink in between is skipped, so no name from outside the
workspace is ever listed. A symlink is reported as a name (never followed, never with a ``/``).

Globs are matched one path component at a time (``GlobMatcher``), pathlib's way: ``*``, ``?``
and ``[...]`` stay inside one component (and match dot-files), ``**`` is any number of
directories (a trailing ``**`` matches directories only). Directories no match can start in
are not entered at all.

``Budget`` caps the work of one call (entries looked at and seconds), so a tool running in a
worker thread, which a timeout cannot stop, always ends on its own.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_VISITS = 200_000
"""Directory entries one call looks at, at most."""
MAX_SECONDS = 20.0
"""Seconds one call walks (and searches), at most."""


@dataclass(slots=True)
class Budget:
    """Work left to one call; ``spent`` says (and remembers) when it ran out."""

    visits: int = MAX_VISITS
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)
    exhausted: str | None = None
    """Why the call stopped early (for the note shown to the model), or None."""

    def spend(self, n: int = 1) -> bool:
        """Charge ``n`` entries; True when the budget is spent (the caller stops)."""
        self.visits -= n
        if self.visits < 0:
            self.exhausted = f"stopped after looking at {MAX_VISITS} entries"
        elif time.monotonic() > self.deadline:
            self.exhausted = f"stopped after {MAX_SECONDS:g} s"
        return self.exhausted is not None

    def note(self) -> str:
        """A line telling the model the result is partial, or ''."""
        if self.exhausted is None:
            return ""
        return f"\n[{self.exhausted}; results are partial: narrow the path or pattern]"


def _magic(part: str) -> bool:
    return any(c in part for c in "*?[")


class GlobMatcher:
    """A glob as a small automaton over path components (states = pattern positions)."""

    def __init__(self, pattern: str) -> None:
        parts = PurePosixPath(pattern).parts
        if not parts:
            raise ValueError("pattern must not be empty; use '**/*' for everything")
        self.parts = parts
        self.dirs_only = parts[-1] == "**"
        self.start = self._closure({0})

    def _closure(self, states: set[int]) -> frozenset[int]:
        out, todo = set(states), list(states)
        while todo:  # ``**`` may match no component at all
            i = todo.pop()
            if i < len(self.parts) and self.parts[i] == "**" and i + 1 not in out:
                out.add(i + 1)
                todo.append(i + 1)
        return frozenset(out)

    def step(self, states: frozenset[int], name: str) -> frozenset[int]:
        """The states after one more path component ``name``."""
        out: set[int] = set()
        for i in states:
            if i >= len(self.parts):
                continue
            pat = self.parts[i]
            if pat == "**":
                out.add(i)
            elif pat == name if not _magic(pat) else fnmatch.fnmatchcase(name, pat):
                out.add(i + 1)
        return self._closure(out) if out else frozenset()

    def accepts(self, states: frozenset[int], is_dir: bool) -> bool:
        """Whether a path that led to ``states`` matches the whole glob."""
        return len(self.parts) in states and (is_dir or not self.dirs_only)


@dataclass(slots=True, frozen=True)
class Entry:
    """One name found by a walk, relative to where the walk started."""

    rel: str
    is_dir: bool
    is_link: bool


def _kind(name: str, dirfd: int) -> tuple[bool, bool]:
    """(is a real directory, is a symlink), without following links."""
    try:
        mode = os.lstat(name, dir_fd=dirfd).st_mode
    except OSError:
        return False, False
    return stat.S_ISDIR(mode), stat.S_ISLNK(mode)


def walk(root: Path, budget: Budget, matcher: GlobMatcher | None = None) -> Iterator[Entry]:
    """Every entry below ``root`` in sorted order (with ``matcher``: only matching ones, and
    only directories a match can start in are entered)."""
    states: dict[str, frozenset[int]] = {".": matcher.start} if matcher else {}
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        here = states.pop(rel_dir, frozenset())
        keep: list[str] = []
        for name in sorted(dirnames + filenames):
            if budget.spend():
                dirnames[:] = []
                return
            is_dir, is_link = _kind(name, dirfd)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if matcher is None:
                yield Entry(rel, is_dir, is_link)
            else:
                nxt = matcher.step(here, name)
                if matcher.accepts(nxt, is_dir):
                    yield Entry(rel, is_dir, is_link)
                if is_dir and any(i < len(matcher.parts) for i in nxt):
                    states[rel] = nxt
            if is_dir and (matcher is None or rel in states):
                keep.append(name)
        dirnames[:] = keep
