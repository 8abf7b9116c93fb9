"""The stranded-run sweep: every worker now and then asks the store to dispatch runs a dying
process left ``queued`` without a job (``Dispatch.redispatch_stranded``; on a Redis Cluster a
run's queueing and its job are two writes, in two slots). Two workers sweeping at once may
both dispatch a run: it is claimed once."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.store.contract import Backend
from app.store.errors import BackendError
from app.telemetry import metrics

log = logging.getLogger(__name__)
EVERY = 5.0
"""Seconds between two sweeps of one worker (a stranded run waits at most the store's
threshold plus this)."""


async def redispatch_stranded(backend: Backend, stop: asyncio.Event,
                              every: float = EVERY) -> None:
    """Until ``stop`` is set: dispatch stranded runs."""
    while not stop.is_set():
        try:
            for run_id in await backend.redispatch_stranded():
                metrics.STRANDED_RUNS.inc()
                log.warning("run %s: queued without a job (a process died before writing it); "
                            "dispatched again", run_id)
        except BackendError as exc:
            log.warning("stranded-run sweep: store unavailable (%s)", exc)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await stop.wait()
