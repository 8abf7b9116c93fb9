"""Runs, their logs, cancel and dispatch in the in-process backend (``MemoryCore``'s state).

Same contract as the Redis backend (tests/backends runs one suite against both): seqs allocated
at append, fenced writes, leases renewed by heartbeats and taken over once they lapse. Nothing
survives the process, so "crash recovery" here only covers a worker task that stops
heartbeating.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from app.engine.events import ServiceEvent
from app.store.errors import IdempotencyConflict, RunEnded
from app.store.memory.core import KINDS, MemoryCore, RunState, copy_run, set_fields
from app.store.paging import make_cursor, matches, parse_cursor
from app.store.records import (
    REQUIRES_ACTION,
    TERMINAL,
    Claim,
    EventBatch,
    RunPage,
    RunRecord,
    StoredEvent,
    first_event_body,
    now,
    service_event_batch,
)


class MemoryRuns(MemoryCore):
    """See the module docstring (``RunStore``, ``EventLog``, ``CancelSignal``, ``Dispatch``)."""

    async def start(self) -> None:
        """Nothing to connect."""

    async def close(self) -> None:
        """Nothing to release."""

    async def ping(self) -> bool:
        """Always reachable."""
        return True

    # -- runs --------------------------------------------------------------------------
    async def create_run(self, record: RunRecord, *, idempotency_key: str | None = None,
                         request_hash: str | None = None,
                         first_event: ServiceEvent | None = None) -> tuple[RunRecord, bool]:
        """See ``Backend.create_run``."""
        if idempotency_key is not None:
            seen = self._idem.get((record.tenant, idempotency_key))
            if seen is not None:
                if seen[0] != (request_hash or ""):
                    raise IdempotencyConflict(idempotency_key)
                first = await self.get_run(seen[1])
                if first is not None:
                    return first, False
            self._idem[(record.tenant, idempotency_key)] = (request_hash or "", record.id)
        state = self._state[record.id] = RunState()
        if first_event is not None:
            record.last_seq = 1
            state.events.append((1, *first_event_body(record.id, first_event)))
        self._runs[record.id] = copy_run(record)
        self._push_job(record.id)
        return copy_run(record), True

    async def get_run(self, run_id: str) -> RunRecord | None:
        """See ``Backend.get_run``."""
        record = self._record(run_id)
        if record is None:
            return None
        found = copy_run(record)
        found.cancel_requested = run_id in self._cancelled
        return found

    async def list_runs(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                        limit: int, cursor: str | None, owner: str | None = None) -> RunPage:
        """See ``Backend.list_runs`` (cursor: ``<created_at>|<id>`` of the last run shown)."""
        runs = [r for r in list(self._runs.values()) if r.tenant == tenant
                and self._record(r.id) is not None]
        runs.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        after = parse_cursor(cursor)
        page: list[RunRecord] = []
        for r in runs:
            if after is not None and (r.created_at, r.id) >= after:
                continue
            if matches(r, status, metadata, owner):
                page.append(copy_run(r))
                if len(page) > limit:
                    break
        more = len(page) > limit
        page = page[:limit]
        return RunPage(runs=page, next_cursor=make_cursor(page[-1]) if more else None)

    async def update_run(self, run_id: str, attempt: int, **fields: Any) -> None:
        """See ``Backend.update_run``."""
        set_fields(self._fenced(run_id, attempt), fields)

    async def expires_in(self, run_id: str) -> float | None:
        """Seconds until the run's data is dropped (None: kept while it runs)."""
        deadline = self._expires.get(run_id)
        return None if deadline is None else deadline - now()

    # -- checkpoints and events -------------------------------------------------------
    async def load_checkpoint(self, run_id: str) -> list[dict[str, Any]]:
        """See ``Backend.load_checkpoint``."""
        state = self._state.get(run_id)
        return [orjson.loads(m) for m in state.ckpt] if state else []

    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """See ``Backend.append_events``."""
        return self.append_now(run_id, attempt, batch)

    async def append_service_event(self, run_id: str, event: ServiceEvent) -> int:
        """See ``EventLog.append_service_event``."""
        return self.append_now(run_id, None, service_event_batch(run_id, event))

    def append_now(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """``append_events`` without the await: the run's sink writes from the loop's step
        (``app.worker.sink``)."""
        record = self._fenced(run_id, attempt) if attempt is not None else self._must(run_id)
        state = self._state[run_id]
        if batch.token is not None and batch.token == state.last_token:
            return record.last_seq
        if batch.events and record.status in TERMINAL:
            raise RunEnded(f"run {run_id} has ended: no event after agent_end")
        self._add_events(record, state, batch.events)
        state.ckpt.extend(batch.checkpoint)
        for kind, message_id in batch.acks:
            state.inflight[kind] = [q for q in state.inflight[kind] if q.id != message_id]
        if batch.fields:
            set_fields(record, batch.fields)
        state.last_token = batch.token
        return record.last_seq

    async def get_run_and_events(self, run_id: str, after: int, limit: int
                                 ) -> tuple[RunRecord | None, list[StoredEvent]]:
        """See ``Backend.get_run_and_events``."""
        return await self.get_run(run_id), await self.read_events(run_id, after, limit)

    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """See ``Backend.read_events`` (seq n sits at index n-1)."""
        state = self._state.get(run_id)
        if state is None or self._record(run_id) is None:
            return []
        return [StoredEvent(*e) for e in state.events[max(after, 0):max(after, 0) + limit]]

    async def wait_events(self, run_id: str, after: int, timeout: float, *,  # noqa: ASYNC109
                          parked: bool = False) -> list[StoredEvent]:
        """See ``Backend.wait_events``."""
        events = await self.read_events(run_id, after)
        state = self._state.get(run_id)
        if events or state is None:
            return events
        if parked and self._record(run_id).status == REQUIRES_ACTION:  # type: ignore[union-attr]
            return []
        try:
            async with asyncio.timeout(timeout):
                await state.readers_event().wait()
        except TimeoutError:
            return []
        return await self.read_events(run_id, after)

    # -- cancel -----------------------------------------------------------------------
    async def request_cancel(self, run_id: str) -> None:
        """See ``Backend.request_cancel``."""
        self._must(run_id)
        self._cancel_run(run_id)

    async def cancel_requested(self, run_id: str) -> bool:
        """See ``Backend.cancel_requested``."""
        return run_id in self._cancelled

    async def wait_cancel(self, run_id: str) -> None:
        """See ``Backend.wait_cancel``."""
        await self._cancel_event(run_id).wait()

    # -- dispatch ---------------------------------------------------------------------
    async def claim(self, worker: str, timeout: float) -> Claim | None:  # noqa: ASYNC109
        """See ``Backend.claim``."""
        claims = await self.claim_many(worker, timeout, 1)
        return claims[0] if claims else None

    async def claim_many(self, worker: str, timeout: float,  # noqa: ASYNC109
                         count: int) -> list[Claim]:
        """See ``Backend.claim_many``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            claims: list[Claim] = []
            while len(claims) < count and (claim := self._claim_now(worker)) is not None:
                claims.append(claim)
            if claims or loop.time() >= deadline:
                return claims
            self._jobs_changed.clear()
            wait = min(deadline - loop.time(), 0.05 if self._leases else 1.0)
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    await self._jobs_changed.wait()
            except TimeoutError:
                pass

    async def heartbeat(self, worker: str) -> None:
        """See ``Backend.heartbeat``."""
        self._alive[worker] = now() + self.lease

    async def finish(self, run_id: str, attempt: int) -> None:
        """See ``Backend.finish``."""
        self._fenced(run_id, attempt)
        self._leases.pop(run_id, None)
        self._expires[run_id] = now() + self.run_ttl

    async def release_run(self, run_id: str, attempt: int) -> None:
        """See ``Backend.release_run``."""
        record = self._fenced(run_id, attempt)
        record.worker = None
        self._leases.pop(run_id, None)
        self._jobs.appendleft(run_id)
        self._jobs_changed.set()

    async def redispatch_stranded(self) -> list[str]:
        """See ``Backend.redispatch_stranded``: none here (a run and its job are one step)."""
        return []

    # -- claiming ---------------------------------------------------------------------
    def _claim_now(self, worker: str) -> Claim | None:
        t = now()
        if t >= self._next_lease_scan:  # an O(runs) scan: not on every claim
            lapsed = next((r for r, w in self._leases.items()  # never its own: it is alive
                           if w != worker and self._alive.get(w, 0) < t), None)
            if lapsed is not None:
                return self._assign(lapsed, worker)
            self._next_lease_scan = t + min(0.25, self.lease / 4)
        while self._jobs:
            run_id = self._jobs.popleft()
            record = self._record(run_id)
            if record is not None and record.status not in TERMINAL:
                return self._assign(run_id, worker)
        return None

    def _assign(self, run_id: str, worker: str) -> Claim:
        record = self._runs[run_id]
        record.attempt += 1
        record.worker = worker
        self._leases[run_id] = worker
        self._alive[worker] = now() + self.lease  # a claim is a heartbeat
        state = self._state[run_id]
        for kind in KINDS:  # taken by the previous attempt, never injected: back to the head
            state.queues[kind].extendleft(reversed(state.inflight[kind]))
            state.taken.difference_update(q.id for q in state.inflight[kind])
            state.inflight[kind] = []
        return Claim(run_id=run_id, attempt=record.attempt, resumed=record.attempt > 1)

    # -- counters -----------------------------------------------------------------------
    async def count_hit(self, key: str, window: float) -> tuple[int, float]:
        """See ``Counters.count_hit``."""
        t = now()
        ends, hits = self._counters.get(key, (0.0, 0))
        if ends <= t:
            ends, hits = t + window, 0
            if len(self._counters) > 100_000:  # drop the windows that have ended
                self._counters = {k: v for k, v in self._counters.items() if v[0] > t}
        self._counters[key] = (ends, hits + 1)
        return hits + 1, ends - t
