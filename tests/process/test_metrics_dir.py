"""The metrics directory ``serve --processes N`` shares: an exited process's files folded into
one set without changing a sum a scrape reports, a scrape never reading a fold half-done, and
the directory of a supervisor that was killed removed by the next one.

Real processes write the files (``app.telemetry.metrics`` in multiprocess mode), as the
supervisor's children do."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from prometheus_client.multiprocess import mark_process_dead

from app.process.supervisor import fold_metrics
from app.telemetry.metrics import metrics_response
from app.telemetry.multiprocess import EXITED, PREFIX, MetricsDir, collect_lock, fold_exited
from tests.engine.processes import ROOT
from tests.process.supervised import alive, until

pytestmark = pytest.mark.timeout(180)

# One of the supervisor's children, as far as metrics go: counts, then exits (or waits for
# its stdin to close: a live process).
_CHILD = """
import sys
from app.telemetry import metrics as m
n = int(sys.argv[1])
m.RUNS_CREATED.inc(n)
m.RUNS_ENDED.labels("completed", "stop").inc(n + 1)
m.PROVIDER_LATENCY.labels("openai").observe(0.2 * n)
m.TOOL_LATENCY.labels("unknown", "ok").observe(7)
m.QUEUE_DEPTH.labels("steer").inc(n)
m.ACTIVE_RUNS.inc(1)
print("counted", flush=True)
if sys.argv[2] == "live":
    sys.stdin.read()
"""


async def _child(path: Path, n: int, *, live: bool = False) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, str(n), "live" if live else "exit",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(path), "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 120) == b"counted\n"
    if not live:
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    return proc


def _listing(path: Path, pattern: str = "*") -> list[str]:
    """The names in ``path`` matching ``pattern`` (none if it is gone), sorted."""
    return sorted(p.name for p in path.glob(pattern))


def _scrape(path: Path) -> list[str]:
    body = metrics_response(str(path)).body
    assert isinstance(body, bytes)
    return sorted(line for line in body.decode().splitlines() if not line.startswith("#"))


def _samples(lines: list[str]) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines}


def _sample(lines: list[str], name: str) -> float:
    [value] = [float(line.rsplit(" ", 1)[1]) for line in lines
               if line.rsplit(" ", 1)[0] == name]
    return value


async def test_exited_processes_are_folded_into_one_set_of_files_and_every_sum_stays(
        tmp_path: Path) -> None:
    metrics = MetricsDir(str(tmp_path))
    path = Path(metrics.path)
    live = await _child(path, 100, live=True)
    try:
        exited = [await _child(path, n) for n in (1, 2, 3)]
        for proc in exited:
            mark_process_dead(proc.pid, str(path))  # type: ignore[no-untyped-call]
        before = _scrape(path)
        assert _sample(before, "agentloop_runs_accepted_total") == 106
        assert _sample(before, 'agentloop_active_runs') == 1  # live processes only

        folded = [fold_exited(str(path), proc.pid) for proc in exited]
        assert folded == [3, 3, 3]  # counters, histograms, the sum gauge
        # every series, buckets and sums included (sums added in another order may differ
        # in their last bit)
        assert _samples(_scrape(path)) == pytest.approx(_samples(before), rel=1e-12)
        names = _listing(path, "*.db")
        assert names == sorted([f"counter_{EXITED}.db", f"histogram_{EXITED}.db",
                                f"gauge_sum_{EXITED}.db", f"counter_{live.pid}.db",
                                f"histogram_{live.pid}.db", f"gauge_sum_{live.pid}.db",
                                f"gauge_livesum_{live.pid}.db"])
        assert fold_exited(str(path), exited[0].pid) == 0  # nothing left of it

        # more restarts add nothing to the directory, and still count
        again = await _child(path, 4)
        mark_process_dead(again.pid, str(path))  # type: ignore[no-untyped-call]
        assert fold_exited(str(path), again.pid) == 3
        after = _scrape(path)
        assert _sample(after, "agentloop_runs_accepted_total") == 110
        assert _sample(after, 'agentloop_runs_ended_total{status="completed",stop_reason="stop"}'
                       ) == 115
        assert _sample(after, 'agentloop_queue_depth{kind="steer"}') == 110
        assert len(_listing(path, "*.db")) == len(names)
    finally:
        assert live.stdin is not None
        live.stdin.close()
        await live.wait()
        metrics.close()
    assert path.name not in _listing(tmp_path)


async def test_a_scrape_waits_for_a_fold_in_progress(tmp_path: Path) -> None:
    """While the supervisor holds the fold's lock, a scrape blocks on it (the kernel shows it
    waiting in /proc/locks) and answers once the fold is done."""
    metrics = MetricsDir(str(tmp_path))
    path = Path(metrics.path)
    try:
        await _child(path, 5)
        answered: list[list[str]] = []
        with collect_lock(str(path), exclusive=True):
            inode = (path / ".collect.lock").stat().st_ino
            scrape = threading.Thread(target=lambda: answered.append(_scrape(path)))
            scrape.start()

            def blocked() -> bool:
                return any("->" in line and f":{inode} " in line
                           for line in Path("/proc/locks").read_text().splitlines())

            await until(blocked, 60, "the scrape waiting for the lock")
            assert not answered
        await asyncio.to_thread(scrape.join, 60)
        assert _sample(answered[0], "agentloop_runs_accepted_total") == 5
    finally:
        metrics.close()


_SUPERVISOR = """
import sys
from app.telemetry.multiprocess import MetricsDir
print(MetricsDir(sys.argv[1]).path, flush=True)
sys.stdin.read()
"""


async def test_the_directory_of_a_killed_supervisor_is_removed_by_the_next(
        tmp_path: Path) -> None:
    async def supervisor() -> tuple[asyncio.subprocess.Process, Path]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _SUPERVISOR, str(tmp_path), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        return proc, Path(line.decode().strip())

    (killed, killed_dir), (running, running_dir) = await supervisor(), await supervisor()
    try:
        assert killed_dir.name.startswith(PREFIX) and killed_dir.is_dir()
        killed.send_signal(signal.SIGKILL)
        await killed.wait()
        assert not alive(killed.pid) and killed_dir.is_dir()  # left behind

        metrics = MetricsDir(str(tmp_path))
        assert not killed_dir.exists()  # nobody held it
        assert running_dir.is_dir()  # its supervisor is alive
        assert _listing(tmp_path) == sorted([running_dir.name, Path(metrics.path).name])
        metrics.close()
        assert _listing(tmp_path) == [running_dir.name]
    finally:
        assert running.stdin is not None
        running.stdin.close()
        await running.wait()


def test_a_file_the_fold_cannot_read_is_left_and_logged_not_raised(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The supervisor folds in its own loop: an exception there would end the slot's task and
    stop every process. A truncated file (struct.error, not OSError) is left where it is."""
    (tmp_path / "counter_42.db").write_bytes(b"\xff\xff\x00\x00garbage")
    with caplog.at_level("WARNING", logger="app.process.supervisor"):
        fold_metrics(str(tmp_path), 42)
    assert (tmp_path / "counter_42.db").exists()
    assert "could not fold the metrics of process 42" in caplog.text


def test_a_directory_left_under_its_hidden_name_is_removed_once_a_minute_old(
        tmp_path: Path) -> None:
    """A supervisor killed between making its directory and renaming it leaves it hidden and
    unlocked. A starting supervisor's own is in that state for microseconds, so only one a
    minute old goes; one a live supervisor still holds stays whatever its age."""
    import fcntl
    import time

    from app.telemetry.multiprocess import MAKING_GRACE, sweep_orphans

    old, young, held = (tmp_path / f".{PREFIX}new-{name}" for name in ("old", "young", "held"))
    for path in (old, young, held):
        path.mkdir()
        (path / "counter_1.db").write_bytes(b"")
    past = time.time() - MAKING_GRACE - 5
    for path in (old, held):
        os.utime(path, (past, past))
    fd = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert sweep_orphans(str(tmp_path)) == [str(old)]
        assert not old.exists() and young.is_dir() and held.is_dir()
        # a minute on, the young one is an orphan too; the held one still is not
        assert sweep_orphans(str(tmp_path), now=time.time() + MAKING_GRACE + 5) == [str(young)]
        assert held.is_dir()
    finally:
        os.close(fd)


_AS_NOBODY = """
import json, sys
from app.telemetry.multiprocess import MetricsDir, sweep_orphans
removed = sweep_orphans(sys.argv[1])
mine = MetricsDir(sys.argv[1])
print(json.dumps({"removed": removed, "mine": mine.path}), flush=True)
mine.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root to make another user's directory and drop to a uid")
def test_a_normal_user_sweeps_its_own_orphans_and_leaves_other_users_alone() -> None:
    """A shared temp directory (sticky, as /tmp) holding an orphan of root's (no supervisor
    holds it) and one of the service user's: a supervisor running as that user removes its
    own, cannot open root's (0700) and goes on, and makes its directory."""
    parent = Path(tempfile.mkdtemp(prefix="agentloop-sweep-"))  # reachable by any user
    try:
        parent.chmod(0o1777)
        roots = parent / f"{PREFIX}rootsorphan"
        roots.mkdir(mode=0o700)
        theirs = parent / f"{PREFIX}nobodysorphan"
        theirs.mkdir(mode=0o700)
        (theirs / "counter_7.db").write_bytes(b"")
        for path in (theirs, theirs / "counter_7.db"):
            os.chown(path, 65534, 65534)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
             sys.executable, "-c", _AS_NOBODY, str(parent)],
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"},
            capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["removed"] == [str(theirs)]
        assert roots.is_dir() and not theirs.exists()
        assert Path(seen["mine"]).parent == parent and not Path(seen["mine"]).exists()
    finally:
        shutil.rmtree(parent, ignore_errors=True)
