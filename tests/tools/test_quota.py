"""The workspace size cap: file tools refuse to pass it, code is capped and killed past it."""

from __future__ import annotations

import os
from pathlib import Path

from tests.tools.conftest import call, text
from tool_registry.builtin import quota
from tool_registry.builtin.code import run_shell
from tool_registry.builtin.files import edit_file, write_file

MiB = 1024 * 1024


async def test_file_tools_refuse_to_pass_the_cap_and_write_nothing(ws: Path, ctx, configure):
    configure(workspace_max_bytes=2 * MiB)
    assert not (await call(write_file, {"path": "a.txt", "content": "x" * MiB}, ctx)).is_error
    full = await call(write_file, {"path": "b.txt", "content": "y" * (MiB + 200_000)}, ctx)
    assert full.is_error and "workspace is full" in text(full), text(full)
    assert not (ws / "b.txt").exists()
    # replacing a file counts only the difference
    again = await call(write_file, {"path": "a.txt",
                                    "content": "START" + "z" * (MiB + 500_000)}, ctx)
    assert not again.is_error, text(again)
    grown = await call(edit_file, {"path": "a.txt", "old": "START", "new": "z" * 600_000}, ctx)
    assert grown.is_error and "workspace is full" in text(grown)
    assert quota.usage(ws) <= 2 * MiB


async def test_code_cannot_write_one_file_past_the_room_left(mode, ws: Path, ctx, configure):
    configure(workspace_max_bytes=3 * MiB)
    result = await call(run_shell, {"command": "head -c 20000000 /dev/zero > big"}, ctx)
    assert "File size limit exceeded" in text(result), text(result)  # SIGXFSZ stopped it
    assert quota.usage(ws) <= 3 * MiB


async def test_code_writing_many_files_is_killed_past_the_cap(mode, ws: Path, ctx, configure):
    configure(workspace_max_bytes=4 * MiB)
    command = "for i in $(seq 1 60); do head -c 1000000 /dev/zero > f$i; sleep 0.05; done; echo end"
    result = await call(run_shell, {"command": command, "timeout": 60}, ctx)
    out = text(result)
    assert result.is_error and "size limit" in out and "workspace is full" in out, out
    assert "end" not in out
    assert len([n for n in os.listdir(ws) if n.startswith("f")]) < 60
    # the model can still clean up; then writing works again
    assert (await call(write_file, {"path": "n.txt", "content": "x"}, ctx)).is_error
    cleaned = await call(run_shell, {"command": "rm -f f*; echo cleaned"}, ctx)
    assert "cleaned" in text(cleaned) and not cleaned.is_error, text(cleaned)
    assert not (await call(write_file, {"path": "n.txt", "content": "x"}, ctx)).is_error


async def test_no_cap_when_zero(ws: Path, ctx, configure):
    configure(workspace_max_bytes=0)
    assert quota.room(ws) is None
    assert not (await call(write_file, {"path": "a", "content": "x" * 100_000}, ctx)).is_error
