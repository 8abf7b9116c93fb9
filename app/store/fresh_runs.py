"""Runs this process created a moment ago, each with its first event (``run_created``, seq 1).

A browser opens the run's event stream right after its ``POST /runs`` returns, usually on the
same connection to the same process. On a store across the network (Redis) the stream's first
page would be one more round trip for what this process wrote itself: the run's tenant and its
seq-1 event. ``GET /runs/{id}/events`` from the start (no ``Last-Event-ID``/``?after=``) of a
run found here sends that event and tails the log after it, exactly as if it had read it::

    POST /runs ─ create (one round trip) ─ remember (tenant, event 1) ─ 201
    GET events, after 0 ─ found here, same tenant ─ send event 1 ─ tail after seq 1
                        ─ not found (another process, expired, resumed) ─ read the store

Only what the store acknowledged is remembered, and nothing here says whether the run is
still live: the stream learns that from the log as any stream does (a run that ended already
streams its events and closes at its ``agent_end``). Entries last ``FRESH_S`` seconds and at
most ``MAX_FRESH`` are kept (the oldest go first), so memory stays bounded under any burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.store.records import StoredEvent

FRESH_S = 5.0
"""How long a created run's first event is remembered (s): a stream opened later reads it."""
MAX_FRESH = 10_000
"""Most runs remembered at once (a few hundred bytes each)."""


@dataclass(slots=True, frozen=True)
class FreshRun:
    """A run this process created: whose it is and its seq-1 event as stored."""

    tenant: str
    first: StoredEvent
    until: float
    owner: str | None = None


class FreshRuns:
    """Created runs by id, oldest first, each until ``ttl`` seconds after its creation."""

    def __init__(self, ttl: float = FRESH_S, limit: int = MAX_FRESH,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.limit = limit
        self._clock = clock
        self._runs: dict[str, FreshRun] = {}

    def add(self, run_id: str, tenant: str, first: StoredEvent,
            owner: str | None = None) -> None:
        """Remember a run the store has just acknowledged, dropping the expired and the
        oldest beyond ``limit`` (insertion order is creation order)."""
        now = self._clock()
        runs = self._runs
        while runs:
            oldest = next(iter(runs))
            if runs[oldest].until > now and len(runs) < self.limit:
                break
            del runs[oldest]
        runs[run_id] = FreshRun(tenant, first, now + self.ttl, owner)

    def get(self, run_id: str) -> FreshRun | None:
        """The run if it was created here less than ``ttl`` seconds ago."""
        found = self._runs.get(run_id)
        if found is None or found.until <= self._clock():
            return None
        return found

    def __len__(self) -> int:
        return len(self._runs)
