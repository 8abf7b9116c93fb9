"""Removing the workspaces of runs that are gone, so disk use follows ``AGENTLOOP_RUN_TTL``.

A run's files live in ``workspace_root/<run_id>`` (``tool_registry.builtin.workspace``); the
run's record, events and checkpoint expire ``run_ttl`` seconds after it ends (both backends).
Every worker process (``agentloop worker``, or ``serve`` with its embedded worker) sweeps::

    every sweep_seconds ─ for each directory in workspace_root (never the shared workspace):
        unchanged for GRACE_SECONDS (no entry added or removed directly in it)
        and backend.get_run(name) is None  (expired, or never a stored run; a thread's
                                            directory: get_thread, app.worker.thread_runs)
        ─▶ removed (in a thread)

The grace keeps a directory that is being set up (or used by an in-process ``runtime.exec``,
whose run is not stored) from being swept under it. Workers sharing a volume may sweep the
same directory at once; removal is idempotent. The root belongs to agentloop: anything else in
it is removed the same way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from pathlib import Path

from app.engine.cancelling import raise_if_cancelling
from app.store.contract import Backend
from app.store.errors import BackendError
from app.worker.thread_runs import workspace_gone

log = logging.getLogger(__name__)

GRACE_SECONDS = 3600.0
"""How long a workspace must be left untouched before it may be removed."""


def _candidates(root: Path, keep: Path | None, grace: float) -> list[Path]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    cutoff = time.time() - grace
    kept = keep.resolve() if keep is not None else None
    return [Path(e.path) for e in entries
            if e.is_dir(follow_symlinks=False) and e.stat(follow_symlinks=False).st_mtime < cutoff
            and Path(e.path).resolve() != kept]


async def sweep(backend: Backend, root: Path, *, grace: float | None = None,
                keep: Path | None = None) -> list[str]:
    """Remove the workspaces under ``root`` whose runs are gone (untouched for ``grace``,
    default ``GRACE_SECONDS``); returns their names."""
    removed = []
    wait = GRACE_SECONDS if grace is None else grace
    for path in await asyncio.to_thread(_candidates, root, keep, wait):
        if await workspace_gone(backend, path.name):  # a run's, or a thread's
            await asyncio.to_thread(shutil.rmtree, path, True)
            removed.append(path.name)
    if removed:
        log.info("removed %d workspace(s) of expired runs from %s", len(removed), root)
    return removed


async def run_janitor(backend: Backend, root: Path, *, every: float,
                      keep: Path | None = None) -> None:
    """Sweep every ``every`` seconds until cancelled (a backend outage skips a round)."""
    while True:
        try:
            await sweep(backend, root, keep=keep)
        except BackendError as exc:
            log.warning("workspace sweep skipped: backend unavailable (%s)", exc)
        except OSError as exc:
            log.warning("workspace sweep failed: %s", exc)
        raise_if_cancelling()
        await asyncio.sleep(every)
