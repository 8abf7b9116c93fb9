"""Thread helpers over the store (the protocol is ``app.store.contract.ThreadStore``)."""

from __future__ import annotations

from app.store.contract import Backend
from app.store.records import TERMINAL
from app.store.thread_records import ThreadRecord

DEFAULT_THREAD_TTL = 30 * 86400.0
"""Seconds an idle thread is kept after its last activity (``AGENTLOOP_THREAD_TTL``)."""


async def settled(backend: Backend, record: ThreadRecord) -> ThreadRecord:
    """``record``, after settling it if its active run has ended (a worker that died between
    a run's end and its settle leaves that to the next reader)."""
    if record.active_run is None:
        return record
    run = await backend.get_run(record.active_run)
    if run is not None and run.status not in TERMINAL:
        return record
    await backend.settle_thread(record.id)
    return await backend.get_thread(record.id) or record
