"""bench/instructions.py: callgrind counts a server's own instructions over the runs it is
asked for, read from the dump it writes while counting (not from the empty one at exit)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import instructions
from bench._procs import Proc

pytestmark = pytest.mark.timeout(180)


def test_totals_reads_the_last_totals_line_of_every_dump(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("events: Ir\nsummary: 0\n\ntotals: 0\n")
    (tmp_path / "out.1").write_text("events: Ir\nsummary: 0\nfn=x\n1 5\n\ntotals: 1234\n")
    (tmp_path / "other").write_text("totals: 99\n")
    assert instructions.totals(tmp_path / "out") == 1234


def test_run_body_asks_the_fake_for_the_answer_size() -> None:
    assert instructions.run_body(7)["input"].endswith(" answer=7")


@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="valgrind not installed")
def test_counts_grow_with_the_frames_relayed(fake: Proc) -> None:
    """The relay floor (quick to start under valgrind): every run completes, and a run with
    40 more text deltas costs more instructions, by roughly what relaying them costs."""
    floor = instructions.Target("relay-floor", instructions.ROOT, floor=True)
    short, long = (instructions.count(floor, fake, deltas, 3, 2, redis=False)
                   for deltas in (0, 40))
    for row in (short, long):
        assert row["ok"] == 3 and not row["errors"], row
    assert short["instructions_per_run"] > 100_000  # two TLS model calls at least
    per_frame = (long["instructions_per_run"] - short["instructions_per_run"]) / 40
    assert 5_000 < per_frame < 500_000, (short, long)
