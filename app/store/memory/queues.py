"""The steering and follow-up queues of the in-process backend (``QueueStore``)."""

from __future__ import annotations

from app.engine.queues import QueuedMessage, QueueKind, QueueMode
from app.store.errors import QueueFull, QueueItemTaken, RunEnded, RunNotFound
from app.store.memory.core import KINDS, MemoryCore, RunState
from app.store.records import TERMINAL, RunRecord, queue_event_body


class MemoryQueues(MemoryCore):
    """See ``app.store.contract.QueueStore``; one step each (no await inside)."""

    async def enqueue(self, run_id: str, kind: QueueKind, item: QueuedMessage, *,
                      limit: int | None = None) -> int:
        """See ``QueueStore.enqueue`` (a steer wakes a parked run in the same step)."""
        record, state = self._open(run_id)
        if limit is not None and sum(len(state.queues[k]) for k in KINDS) >= limit:
            raise QueueFull(run_id, limit)
        queue = state.queues[kind]
        queue.append(item)
        body = queue_event_body(run_id, "message_queued", item.id, kind)
        self._add_events(record, state, [("message_queued", body)])
        if kind == "steer":
            self._wake_parked(run_id)
        return len(queue)

    async def close_queues(self, run_id: str, attempt: int) -> bool:
        """See ``QueueStore.close_queues``."""
        self._fenced(run_id, attempt)
        state = self._state[run_id]
        if any(state.queues[kind] for kind in KINDS):
            return False
        state.closed = True
        return True

    def _open(self, run_id: str) -> tuple[RunRecord, RunState]:
        """The run and its state if it still takes messages, else ``RunEnded``."""
        record = self._must(run_id)
        state = self._state[run_id]
        if state.closed or record.status in TERMINAL:
            raise RunEnded(f"run {run_id} has ended ({record.status})")
        return record, state

    async def list_queue(self, run_id: str) -> list[tuple[QueueKind, QueuedMessage]]:
        """See ``QueueStore.list_queue``."""
        state = self._state.get(run_id)
        if state is None:
            return []
        return [(kind, item) for kind in KINDS for item in state.queues[kind]]

    async def withdraw(self, run_id: str, message_id: str) -> QueueKind:
        """See ``QueueStore.withdraw``."""
        state = self._state.get(run_id)
        if state is None:
            raise RunNotFound(run_id)
        for kind in KINDS:
            for item in state.queues[kind]:
                if item.id == message_id:
                    record, _ = self._open(run_id)  # a run that ended keeps its queue as is
                    state.queues[kind].remove(item)
                    body = queue_event_body(run_id, "message_withdrawn", message_id, kind)
                    self._add_events(record, state, [("message_withdrawn", body)])
                    return kind
        if message_id in state.taken:
            raise QueueItemTaken(message_id)
        raise RunNotFound(message_id)

    async def take(self, run_id: str, kind: QueueKind, mode: QueueMode,
                   attempt: int | None = None, token: str | None = None
                   ) -> list[QueuedMessage]:
        """See ``QueueStore.take``."""
        if attempt is not None:
            self._fenced(run_id, attempt)
        state = self._state[run_id]
        last = state.took.get(kind)
        if token and last is not None and last[0] == token:
            return [q for q in state.inflight[kind] if q.id in last[1]]
        queue = state.queues[kind]
        count = len(queue) if mode == "all" else min(1, len(queue))
        taken = [queue.popleft() for _ in range(count)]
        state.inflight[kind].extend(taken)
        state.taken.update(q.id for q in taken)
        if token:
            state.took[kind] = (token, {q.id for q in taken})
        return taken

    async def ack(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``QueueStore.ack``."""
        state = self._state.get(run_id)
        if state is not None:
            ids = {q.id for q in items}
            state.inflight[kind] = [q for q in state.inflight[kind] if q.id not in ids]

    async def release(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``QueueStore.release``."""
        state = self._state.get(run_id)
        if state is None:
            return
        ids = {q.id for q in items}
        state.inflight[kind] = [q for q in state.inflight[kind] if q.id not in ids]
        state.queues[kind].extendleft(reversed(items))
        state.taken.difference_update(ids)

    async def queue_lengths(self, run_id: str) -> dict[str, int]:
        """See ``QueueStore.queue_lengths``."""
        state = self._state.get(run_id)
        return {k: len(state.queues[k]) if state else 0 for k in KINDS}
