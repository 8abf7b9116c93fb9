"""The steering and follow-up queues of a run on Redis (a part of ``RedisBackend``): each
change is one script on the run's keys (the run's hash tag), fenced where the run's worker
makes it, with its ``message_queued``/``message_withdrawn`` event written in the same script."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from app.engine.queues import QueuedMessage, QueueKind, QueueMode
from app.store.errors import QueueFull, QueueItemTaken, RunNotFound
from app.store.records import EventBatch, parse_queue_entry, queue_entry, queue_event_body
from app.store.redis import keys
from app.store.redis.core import RedisCore
from app.store.redis.errors import guard


class RedisQueues(RedisCore):
    """See ``app.store.contract.QueueStore``."""

    @guard
    async def enqueue(self, run_id: str, kind: QueueKind, item: QueuedMessage, *,
                      limit: int | None = None) -> int:
        """See ``QueueStore.enqueue``: one ENQUEUE script (RPUSH + XADD, refused once closed
        or full; a steer sets a parked run ``queued``, then it is dispatched)."""
        body = queue_event_body(run_id, "message_queued", item.id, kind)
        other: QueueKind = "follow_up" if kind == "steer" else "steer"
        run_keys = [keys.run_key(run_id), keys.queue_key(run_id, kind), keys.events_key(run_id),
                    keys.queue_key(run_id, other), *self._dispatch_keys()]
        marks = await self._mark(run_id) if kind == "steer" else []
        try:
            position, woken = await self._run("ENQUEUE", run_keys, [
                "", queue_entry(item), body, self._channel(run_id), f"e:{run_id}", kind,
                "" if limit is None else limit])
        except ResponseError as exc:  # refused before any write: nothing was queued
            await self._woken(None, marks)
            if "FULL" in str(exc) and limit is not None:
                raise QueueFull(run_id, limit) from exc
            raise
        await self._woken(run_id if woken else None, marks)  # a steer woke the parked run
        return int(position)

    @guard
    async def close_queues(self, run_id: str, attempt: int) -> bool:
        """See ``Backend.close_queues``."""
        run_keys = [keys.run_key(run_id), keys.queue_key(run_id, "steer"),
                    keys.queue_key(run_id, "follow_up")]
        return bool(await self._run("CLOSE_QUEUES", run_keys, [attempt]))

    @guard
    async def list_queue(self, run_id: str) -> list[tuple[QueueKind, QueuedMessage]]:
        """See ``Backend.list_queue``."""
        out: list[tuple[QueueKind, QueuedMessage]] = []
        for kind in ("steer", "follow_up"):
            entries: Any = await self.client.lrange(keys.queue_key(run_id, kind), 0, -1)
            for raw in entries:
                out.append((kind, parse_queue_entry(raw)))
        return out

    @guard
    async def withdraw(self, run_id: str, message_id: str) -> QueueKind:
        """See ``Backend.withdraw``."""
        bodies = [queue_event_body(run_id, "message_withdrawn", message_id, kind)
                  for kind in ("steer", "follow_up")]
        answer = await self._run("WITHDRAW", [keys.run_key(run_id), *keys.queue_keys(run_id),
                                              keys.events_key(run_id)],
                                 ["", message_id, *bodies, self._channel(run_id), f"e:{run_id}"])
        answer = answer.decode()
        if answer == "taken":
            raise QueueItemTaken(message_id)
        if answer == "none":
            raise RunNotFound(message_id)
        return "steer" if answer == "steer" else "follow_up"

    @guard
    async def take(self, run_id: str, kind: QueueKind, mode: QueueMode,
                   attempt: int | None = None, token: str | None = None
                   ) -> list[QueuedMessage]:
        """See ``Backend.take`` (the token is kept in the run hash, ``took:<inflight key>``)."""
        raw = await self._run("TAKE", self._one_queue(run_id, kind),
                              ["" if attempt is None else attempt, mode, token or ""])
        return [parse_queue_entry(r) for r in raw]

    async def ack(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``Backend.ack``."""
        await self.append_events(run_id, None, EventBatch(acks=[(kind, q.id) for q in items]))

    @guard
    async def release(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``Backend.release``."""
        await self._run("RELEASE", self._one_queue(run_id, kind), ["", *(q.id for q in items)])

    def _one_queue(self, run_id: str, kind: QueueKind) -> list[str]:
        return [keys.run_key(run_id), keys.queue_key(run_id, kind),
                keys.inflight_key(run_id, kind), keys.taken_key(run_id)]

    @guard
    async def queue_lengths(self, run_id: str) -> dict[str, int]:
        """See ``Backend.queue_lengths``."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.llen(keys.queue_key(run_id, "steer"))
            pipe.llen(keys.queue_key(run_id, "follow_up"))
            steer, follow_up = await pipe.execute()
        return {"steer": int(steer), "follow_up": int(follow_up)}
