#!/usr/bin/env python3
"""Fill docs/browser.md's code blocks from the playground's own files, so the guide's example
is the code the playground runs and cannot drift from it.

A block is announced by a comment line, then a fenced block that this script rewrites:

    <!-- code: app/static/agentloop.js -->          the whole file
    <!-- code: app/static/app.js#open -->           the lines between `// #region open`
                                                    and `// #endregion open`

`scripts/browser_guide.py` rewrites the guide; `--check` only reports (exit 1) when it is
stale. tests/test_browser_guide.py runs the check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "browser.md"
# (an empty block, a new one waiting to be filled, must not swallow the blocks after it)
BLOCK = re.compile(r"(<!-- code: (?P<ref>[^ ]+) -->\n)```(?P<lang>\w*)\n(?:.*?\n)??```\n", re.S)


def excerpt(ref: str, root: Path = ROOT) -> str:
    """The text ``ref`` names: ``path`` or ``path#region``, ending with a newline."""
    path, _, region = ref.partition("#")
    text = (root / path).read_text()
    if not region:
        return text
    start = re.search(rf"^[ \t]*// #region {re.escape(region)}\n", text, re.M)
    end = re.search(rf"^[ \t]*// #endregion {re.escape(region)}\n", text, re.M)
    if start is None or end is None or end.start() < start.end():
        raise ValueError(f"{path} has no region {region!r}")
    return text[start.end():end.start()]


def render(guide: str, root: Path = ROOT) -> str:
    """``guide`` with every announced block holding its file's current text."""
    def fill(match: re.Match[str]) -> str:
        code = excerpt(match["ref"], root)
        return f"{match[1]}```{match['lang']}\n{code}```\n"

    return BLOCK.sub(fill, guide)


def main(argv: list[str]) -> int:
    current = GUIDE.read_text()
    fresh = render(current)
    if fresh == current:
        return 0
    if "--check" in argv:
        print(f"{GUIDE.relative_to(ROOT)} is stale: run scripts/browser_guide.py",
              file=sys.stderr)
        return 1
    GUIDE.write_text(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
