"""list_files and search_files: no name from outside the workspace, linear-time patterns,
bounded work."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.tools.conftest import call, text
from tool_registry.builtin import _walk
from tool_registry.builtin._search import list_files, search_files


@pytest.fixture
def linked(ws: Path, outside: Path) -> Path:
    """``outlnk`` -> a directory outside holding a file, a subdirectory and a symlink."""
    (outside / "sub").mkdir()
    (outside / "sub" / "deep.txt").write_text("deep\n")
    (outside / "inner_link").symlink_to(outside / "secret.txt")
    (ws / "outlnk").symlink_to(outside)
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("x = 1\n")
    (ws / ".hidden").write_text("h\n")
    return outside


@pytest.mark.parametrize("pattern", ["outlnk/*", "outlnk/**/*", "*/*", "**/*", "*/*/*",
                                     "outlnk/sub/*", "*/inner_link", "**"])
async def test_list_files_shows_no_name_from_a_linked_directory(pattern, linked, ctx):
    result = await call(list_files, {"pattern": pattern}, ctx)
    listed = text(result).removeprefix(f"no files match {pattern!r}")
    assert not result.is_error
    for name in ("secret.txt", "inner_link", "sub", "deep.txt"):
        assert name not in listed, (pattern, listed)


async def test_list_files_glob_semantics(linked, ctx):
    assert text(await call(list_files, {"pattern": "**/*.py"}, ctx)) == "src/a.py"
    assert text(await call(list_files, {"pattern": "src/*"}, ctx)) == "src/a.py"
    everything = text(await call(list_files, {}, ctx)).splitlines()
    assert everything == [".hidden", "outlnk", "src/", "src/a.py"]  # the link: a name only
    assert text(await call(list_files, {"pattern": "**"}, ctx)).splitlines() == ["src/"]
    assert "no files match" in text(await call(list_files, {"pattern": "nope/*"}, ctx))
    assert (await call(list_files, {"pattern": ""}, ctx)).is_error


async def test_search_does_not_enter_a_linked_directory(linked, ctx):
    found = text(await call(search_files, {"pattern": "deep|top secret", "glob": "*"}, ctx))
    assert found.startswith("no matches")


async def test_catastrophic_pattern_is_linear(ws, ctx):
    (ws / "evil.txt").write_text(("a" * 27 + "!\n") * 3 + ("x" * 5000 + "\n") * 2000)
    started = time.monotonic()
    result = await call(search_files, {"pattern": "(a+)+$"}, ctx)
    took = time.monotonic() - started
    assert not result.is_error and text(result).startswith("no matches"), text(result)
    assert took < 2.0, took  # Python's re backtracks ~8 s on each of the first lines


async def test_unsupported_syntax_is_a_clear_error(ws, ctx):
    (ws / "a.txt").write_text("abab\n")
    for pattern in (r"(ab)\1", r"a(?=b)", r"(?<!x)a"):
        result = await call(search_files, {"pattern": pattern}, ctx)
        assert result.is_error and "RE2" in text(result), text(result)
    bad = await call(search_files, {"pattern": "(unclosed"}, ctx)
    assert bad.is_error and "invalid regular expression" in text(bad)


async def test_search_matches_per_line_with_context(ws, ctx):
    (ws / "a.txt").write_text("one\ntwo\nthree\nfour")
    (ws / "bad.txt").write_bytes(b"caf\xe9 two\n")
    found = text(await call(search_files, {"pattern": "^t.o$|ou", "glob": "a.txt"}, ctx))
    assert found == ("a.txt-1- one\na.txt:2: two\na.txt-3- three\n--\n"
                     "a.txt-3- three\na.txt:4: four")
    assert text(await call(search_files, {"pattern": r"two\s+three"}, ctx)).startswith(
        "no matches")  # never across a newline, as before
    assert "bad.txt:1: caf\ufffd two" in text(await call(search_files, {"pattern": "two$"}, ctx))
    assert text(await call(search_files, {"pattern": "(?i)ONE"}, ctx)).startswith("a.txt:1:")


async def test_walk_budget_ends_a_huge_listing(ws, ctx, monkeypatch):
    for i in range(30):
        (ws / f"f{i:02}.txt").write_text("needle\n")
    monkeypatch.setattr(_walk, "MAX_VISITS", 10)
    monkeypatch.setattr(_walk.Budget, "__init__", _small_budget)
    listed = text(await call(list_files, {}, ctx))
    assert "results are partial" in listed and len(listed.splitlines()) < 15
    found = text(await call(search_files, {"pattern": "needle"}, ctx))
    assert "results are partial" in found


def _small_budget(self: _walk.Budget) -> None:
    self.visits, self.deadline, self.exhausted = 10, time.monotonic() + 60, None
