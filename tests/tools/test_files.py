"""File tools against hostile paths: nothing outside the workspace is read, written or listed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tools.conftest import call, exists, text
from tool_registry.builtin import workspace as wsmod
from tool_registry.builtin._search import list_files, search_files
from tool_registry.builtin.code import run_shell
from tool_registry.builtin.files import edit_file, read_file, write_file

ESCAPES = ["../outside/secret.txt", "../../etc/passwd", "/etc/passwd", "/proc/self/environ",
           "/proc/self/root/etc/passwd", "link_out/secret.txt", "file_link", "a/../../x",
           "etc_link/passwd"]


@pytest.fixture
def hostile(ws: Path, outside: Path) -> Path:
    (ws / "link_out").symlink_to(outside)
    (ws / "file_link").symlink_to(outside / "secret.txt")
    (ws / "etc_link").symlink_to("/etc")
    return outside


@pytest.mark.parametrize("path", ESCAPES)
async def test_read_refuses_escapes(path, hostile, ctx):
    result = await call(read_file, {"path": path}, ctx)
    assert result.is_error
    assert "outside the workspace" in text(result)
    assert "top secret" not in text(result) and "root:" not in text(result)


@pytest.mark.parametrize("path", [*ESCAPES, pytest.param(  # an id every xdist process agrees on
    f"/tmp/agentloop-escape-{os.getpid()}", id="absolute_outside")])
async def test_write_and_edit_refuse_escapes_and_touch_nothing(path, hostile, ctx, base):
    before = {p: p.read_bytes() for p in hostile.rglob("*") if p.is_file()}
    wrote = await call(write_file, {"path": path, "content": "pwned"}, ctx)
    edited = await call(edit_file, {"path": path, "old": "top", "new": "pwned"}, ctx)
    assert wrote.is_error and edited.is_error
    assert {p: p.read_bytes() for p in hostile.rglob("*") if p.is_file()} == before
    assert not exists(f"/tmp/agentloop-escape-{os.getpid()}")
    assert not (base / "x").exists()


async def test_symlink_made_by_run_shell_is_not_followed(ws, ctx):
    made = await call(run_shell, {"command": "ln -s /etc sneaky && ln -s /etc/passwd pw"}, ctx)
    assert not made.is_error, text(made)
    for path in ("sneaky/passwd", "pw"):
        result = await call(read_file, {"path": path}, ctx)
        assert result.is_error and "root:" not in text(result)
    assert (await call(write_file, {"path": "sneaky/evil", "content": "x"}, ctx)).is_error
    assert not exists("/etc/evil")


def test_symlink_swapped_in_after_the_check_is_not_followed(ws, outside):
    (ws / "d").mkdir()
    target = wsmod.resolve_in(ws, "d/secret.txt")
    (ws / "d").rmdir()
    (ws / "d").symlink_to(outside)  # the race: a directory became a link after the check
    with pytest.raises(wsmod.OutsideWorkspace):
        wsmod.open_beneath(ws, target, os.O_WRONLY | os.O_TRUNC)
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_listing_and_search_stay_inside(hostile, ws, ctx):
    (ws / "notes.txt").write_text("top secret is not here\n")
    listed = text(await call(list_files, {}, ctx))
    assert "notes.txt" in listed and "secret.txt" not in listed and "passwd" not in listed
    assert (await call(list_files, {"pattern": "../*"}, ctx)).is_error
    assert (await call(list_files, {"pattern": "/etc/*"}, ctx)).is_error
    found = text(await call(search_files, {"pattern": "root|top secret"}, ctx))
    assert found.startswith("notes.txt:1:") and "root:" not in found
    assert (await call(search_files, {"pattern": "root", "path": "../"}, ctx)).is_error
    assert (await call(search_files, {"pattern": "x", "path": "link_out"}, ctx)).is_error


async def test_write_read_edit_roundtrip(ws, ctx):
    wrote = await call(write_file, {"path": "deep/er/f.py", "content": "a = 1\nb = 1\n"}, ctx)
    assert not wrote.is_error, text(wrote)
    assert text(await call(read_file, {"path": "deep/er/f.py"}, ctx)) == (
        "     1\ta = 1\n     2\tb = 1")
    missing = await call(edit_file, {"path": "deep/er/f.py", "old": "c = 1", "new": ""}, ctx)
    assert missing.is_error and "0 matches" in text(missing)
    ambiguous = await call(edit_file, {"path": "deep/er/f.py", "old": " = 1", "new": "=2"}, ctx)
    assert ambiguous.is_error and "2 times" in text(ambiguous)
    done = await call(edit_file, {"path": "deep/er/f.py", "old": " = 1", "new": " = 2",
                                  "replace_all": True}, ctx)
    assert "replaced 2" in text(done)
    assert (ws / "deep/er/f.py").read_text() == "a = 2\nb = 2\n"


async def test_paging_and_caps(ws, ctx, configure):
    configure(output_cap_chars=500, file_size_cap=100_000)
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    first = text(await call(read_file, {"path": "big.txt"}, ctx))
    assert len(first) < 700 and "call again with offset=" in first
    page = text(await call(read_file, {"path": "big.txt", "offset": 990, "limit": 5}, ctx))
    assert page.splitlines()[0] == "   990\tline 990" and "offset=995" in page
    (ws / "huge.bin").write_bytes(b"x" * 100_001)
    too_big = await call(read_file, {"path": "huge.bin"}, ctx)
    assert too_big.is_error and "limit" in text(too_big)
    over = await call(write_file, {"path": "o.txt", "content": "y" * 100_001}, ctx)
    assert over.is_error and not (ws / "o.txt").exists()


async def test_fifo_and_directory_are_refused_without_blocking(ws, ctx):
    os.mkfifo(ws / "pipe")
    assert "regular file" in text(await call(read_file, {"path": "pipe"}, ctx))
    assert "directory" in text(await call(read_file, {"path": "."}, ctx))
