"""bench/syscalls.py: ``strace -c`` summaries read per syscall, and a live count that grows
with the frames a server relays."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench import syscalls
from bench._procs import Proc
from bench.instructions import ROOT, Target

pytestmark = pytest.mark.timeout(180)

SUMMARY = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 41.20    0.004120           3      1204           epoll_pwait
 30.00    0.003000           5       600        12 read
 20.00    0.002000           4       500           write
  8.80    0.000880           1       880           getpid
------ ----------- ----------- --------- --------- ----------------
100.00    0.010000           3      3184        12 total
"""


def test_the_summary_is_read_per_syscall_with_or_without_errors() -> None:
    assert syscalls.parse_summary(SUMMARY) == {
        "epoll_pwait": 1204, "read": 600, "write": 500, "getpid": 880}
    assert syscalls.parse_summary("strace: Process 1 detached\n") == {}


def test_split_gives_calls_per_run_and_per_delta() -> None:
    rows = [{"target": "new", "deltas": 0, "calls_per_run": {"write": 10.0, "read": 8.0}},
            {"target": "new", "deltas": 80, "calls_per_run": {"write": 90.0, "read": 168.0,
                                                              "getpid": 4.0}}]
    out = syscalls.split(rows, "new")
    assert out["syscalls"]["write"] == {"per_run": 10.0, "per_delta": 1.0}
    assert out["syscalls"]["read"] == {"per_run": 8.0, "per_delta": 2.0}
    assert out["syscalls"]["getpid"] == {"per_run": 0, "per_delta": 0.05}
    assert list(out["syscalls"]) == ["read", "write", "getpid"]  # most calls first
    assert out["total_per_run"] == 18.0 and out["total_per_delta"] == 3.05


def _may_trace() -> bool:
    try:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        scope = "0"
    return os.geteuid() == 0 or scope == "0"


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
@pytest.mark.skipif(not _may_trace(), reason="no ptrace rights over a sibling process")
def test_a_relay_writes_more_the_more_frames_it_relays(fake: Proc) -> None:
    floor = Target("relay-floor", ROOT, floor=True)
    short, long = (syscalls.count(floor, fake, deltas, 3, 2, redis=False) for deltas in (0, 40))
    for row in (short, long):
        assert row["ok"] == 3, row
    writes = (long["calls_per_run"].get("write", 0) - short["calls_per_run"].get("write", 0))
    assert 20 <= writes <= 80, (short, long)  # about one SSE write per relayed frame
