"""The approval timeout: every worker looks for parked runs whose ``approval_timeout`` has
passed and wakes them (``ParkingStore.expire_due``, atomic per run, so a decision racing the
timeout comes out one way); the worker that continues such a run denies its unanswered picks.
A parked run holds no task, so this one loop per worker is all the waiting there is."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.store.contract import Backend
from app.store.errors import BackendError
from app.store.records import now

log = logging.getLogger(__name__)
EVERY = 0.25
"""Seconds between two looks (a timeout fires at most this late, plus a claim)."""


async def wake_expired(backend: Backend, stop: asyncio.Event, every: float = EVERY) -> None:
    """Until ``stop`` is set: wake parked runs past their approval deadline."""
    while not stop.is_set():
        try:
            for run_id in await backend.expire_due(now()):
                log.info("run %s: approval timeout passed; woken to deny unanswered picks",
                         run_id)
        except BackendError as exc:
            log.warning("approval timeouts: store unavailable (%s)", exc)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await stop.wait()
