"""The metrics directory ``agentloop serve --processes N`` shares among its processes.

``prometheus_client``'s multiprocess mode keeps each process's values in files named for its
pid (``counter_<pid>.db``, ``histogram_<pid>.db``, ``gauge_<mode>_<pid>.db``), and a scrape
reads every file in the directory. Counters and histograms keep an exited process's files so
that the sums never go back; restarted processes would then leave files behind for ever, and
a crash loop (a restart every 30 s at worst) makes every scrape read thousands of them. So:

- ``fold_exited(path, pid)``: the supervisor, once a process has exited, adds that process's
  counters, histograms and ``sum`` gauges into one ``<kind>_exited.db`` per kind and deletes
  its files: the sums a scrape reports are unchanged, the directory holds one set of files
  per live process and one more. A scrape (``collect_lock``, shared) never sees a fold
  half-done (exclusive): it would count the process twice or not at all, and a counter seen
  to go back is a reset to Prometheus.
- ``MetricsDir``: the directory is the supervisor's for its life (a lock on it) and removed
  when it exits. One left behind by a supervisor that was SIGKILLed holds no lock: the next
  supervisor to start on the machine (same temp dir) removes it::

    open ─ remove agentloop-metrics-* that no process holds (and .agentloop-metrics-new-*
      a minute old: a supervisor killed before its rename) ─ make .agentloop-metrics-new-*
      ─ lock it ─ rename to agentloop-metrics-* (never seen unlocked) ─ … ─ close: remove
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.mmap_dict import MmapedDict

log = logging.getLogger(__name__)

PREFIX = "agentloop-metrics-"
EXITED = "exited"
"""The pid part of the files holding the exited processes' values (the collector reads a
gauge file's pid part as a ``pid`` label, which ``sum`` gauges drop)."""
FOLDED_KINDS = ("counter", "histogram", "summary", "gauge_sum")
"""Kinds whose values across processes are added up, so an exited process's can be added into
one file. Other gauges are left alone: ``live*`` ones are deleted when a process exits, and
``all``/``min``/``max``/``mostrecent`` do not add up."""
_LOCK = ".collect.lock"
MAKING_GRACE = 60.0
"""Seconds after which a directory still under its hidden name is an orphan: a starting
supervisor locks and renames its own within microseconds."""


@contextlib.contextmanager
def collect_lock(path: str, *, exclusive: bool = False) -> Iterator[None]:
    """Hold the directory's lock: shared to read its files (a scrape), exclusive to fold."""
    fd = os.open(os.path.join(path, _LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def fold_exited(path: str, pid: int) -> int:
    """Add an exited process's counters, histograms and ``sum`` gauges into the directory's
    ``<kind>_exited.db`` files and delete its own; how many files were folded."""
    folded = 0
    with collect_lock(path, exclusive=True):
        for kind in FOLDED_KINDS:
            source = Path(path, f"{kind}_{pid}.db")
            if not source.exists():
                continue
            _add_into(Path(path, f"{kind}_{EXITED}.db"), source)
            source.unlink()
            folded += 1
    return folded


def _add_into(target: Path, source: Path) -> None:
    """Add every value of ``source`` to the same key's in ``target`` (made if missing)."""
    values: list[tuple[str, float, float, int]] = (
        MmapedDict.read_all_values_from_file(str(source)))  # type: ignore[no-untyped-call]
    into = MmapedDict(str(target))  # type: ignore[no-untyped-call]
    try:
        for key, value, timestamp, _ in values:
            total, _ = into.read_value(key)  # type: ignore[no-untyped-call]
            into.write_value(key, total + value, timestamp)  # type: ignore[no-untyped-call]
    finally:
        into.close()  # type: ignore[no-untyped-call]


class MetricsDir:
    """A fresh shared metrics directory, held for this process's life (see the module
    docstring); ``close`` removes it."""

    def __init__(self, parent: str | None = None) -> None:
        parent = parent or tempfile.gettempdir()
        for orphan in sweep_orphans(parent):
            log.info("removed %s: left by a supervisor that was killed", orphan)
        making = tempfile.mkdtemp(prefix=f".{PREFIX}new-", dir=parent)
        self._fd = os.open(making, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self.path = os.path.join(parent, PREFIX + os.path.basename(making).rsplit("-", 1)[1])
        os.rename(making, self.path)

    def close(self) -> None:
        """Remove the directory and let go of it."""
        shutil.rmtree(self.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def sweep_orphans(parent: str, *, now: float | None = None) -> list[str]:
    """Remove the shared metrics directories under ``parent`` that no live supervisor holds;
    their paths. A directory still under its hidden name (``.agentloop-metrics-new-*``) is
    unlocked for the moment between its making and its lock: it is removed only once it is
    ``MAKING_GRACE`` s old (a supervisor killed in that moment left it)."""
    removed = []
    now = time.time() if now is None else now
    making = [entry for entry in Path(parent).glob(f".{PREFIX}new-*")
              if _older_than(entry, now - MAKING_GRACE)]
    for entry in [*Path(parent).glob(PREFIX + "*"), *making]:
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or not a directory
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: its supervisor is alive
        try:
            shutil.rmtree(entry, ignore_errors=True)  # another user's stays (sticky /tmp)
            if not entry.exists():
                removed.append(str(entry))
        finally:
            os.close(fd)
    return removed


def _older_than(entry: Path, when: float) -> bool:
    try:
        return entry.stat().st_mtime < when
    except OSError:
        return False  # gone meanwhile
