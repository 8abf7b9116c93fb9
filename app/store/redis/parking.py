"""``ParkingStore`` on Redis: one Lua script per step on the run's keys (``parked``,
``decisions`` beside the record: ``PARK``, ``DECIDE``, ``WAKE`` in ``scripts``), then the
global keys (a job entry for a woken run, the ``al:parked`` deadline index): on one node in
the same script (``RedisCore._dispatch_keys``), on a cluster, where a script may not touch
them, after it (a process dying between the two there leaves a woken run without its job, as
``create_run`` can); the scripts keep every per-run decision exactly-once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from redis.exceptions import ResponseError

from app.engine.events import encode_event_body, utc_now
from app.store.errors import DecisionRefused, RefusalCode
from app.store.records import Answer, ParkedState, now
from app.store.redis import keys
from app.store.redis.core import RedisCore
from app.store.redis.errors import guard


class RedisParking(RedisCore):
    """See ``app.store.contract.ParkingStore``."""

    @guard
    async def park(self, run_id: str, attempt: int, calls: list[dict[str, Any]],
                   deadline: float | None,
                   carried: dict[str, dict[str, Any]] | None = None) -> bool:
        """See ``ParkingStore.park``."""
        job, outcome = await self._run(
            "PARK", [keys.run_key(run_id), keys.parked_key(run_id), keys.decisions_key(run_id),
                     keys.queue_key(run_id, "steer"), *self._dispatch_keys()],
            [attempt, orjson.dumps(calls), "" if deadline is None else repr(deadline),
             repr(now()), orjson.dumps(carried or {}), self._channel(run_id), f"p:{run_id}"])
        if outcome == b"wake":
            await self._woken(run_id)
        elif deadline is not None:
            await self.client.zadd(keys.PARKED_INDEX, {run_id: deadline})
        await self._drop_job(job.decode())
        return bool(outcome == b"parked")

    @guard
    async def decide(self, run_id: str, answers: Sequence[Answer]) -> bool:
        """See ``ParkingStore.decide``: one ``DECIDE`` script for all the answers."""
        args: list[Any] = ["", len(answers), self._channel(run_id), f"e:{run_id}"]
        for answer in answers:
            body = encode_event_body(answer.event, run_id=run_id, ts=utc_now())
            args += [answer.tool_call_id, orjson.dumps(answer.decision), answer.event.type,
                     body]
        marks = await self._mark(run_id)
        outcome, status, call_id = await self._run(
            "DECIDE", [keys.run_key(run_id), keys.parked_key(run_id),
                       keys.decisions_key(run_id), keys.events_key(run_id),
                       *self._dispatch_keys()], args)
        code = outcome.decode()
        await self._woken(run_id if code == "woken" else None, marks)
        if code in ("not_waiting", "unknown_call", "already_decided"):
            refused = call_id.decode() or None
            raise DecisionRefused(code, _refusal(code, run_id, refused, status), refused)
        return bool(code == "woken")

    @guard
    async def wake(self, run_id: str) -> bool:
        """See ``ParkingStore.wake``."""
        marks = await self._mark(run_id)
        woken = await self._run("WAKE", [keys.run_key(run_id), keys.parked_key(run_id),
                                         *self._dispatch_keys()], ["", ""])
        await self._woken(run_id if woken else None, marks)
        return bool(woken)

    @guard
    async def expire_due(self, at: float) -> list[str]:
        """See ``ParkingStore.expire_due``."""
        due: Any = await self.client.zrangebyscore(keys.PARKED_INDEX, "-inf", at)
        woken = []
        for raw in due:
            run_id = raw.decode()
            marks = await self._mark(run_id)
            try:
                hit = await self._run(
                    "WAKE", [keys.run_key(run_id), keys.parked_key(run_id),
                             *self._dispatch_keys()], ["", repr(at)])
            except ResponseError as exc:  # the run expired from the store meanwhile
                if "NOTFOUND" not in str(exc):
                    raise
                hit = 0
            await self._woken(run_id if hit else None, marks)
            if hit:
                woken.append(run_id)
            else:
                await self.client.zrem(keys.PARKED_INDEX, run_id)
        return woken

    @guard
    async def parked_state(self, run_id: str) -> ParkedState | None:
        """See ``ParkingStore.parked_state``."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.parked_key(run_id))
            pipe.hgetall(keys.decisions_key(run_id))
            parked, decisions = await pipe.execute()
        if not parked:
            return None
        deadline = parked.get(b"deadline", b"")
        return ParkedState(calls=orjson.loads(parked[b"calls"]),
                           decisions={k.decode(): orjson.loads(v)
                                      for k, v in decisions.items()},
                           deadline=float(deadline) if deadline else None,
                           expired=bool(parked.get(b"expired")),
                           parked_at=float(parked.get(b"parked_at") or 0),
                           carried=orjson.loads(parked.get(b"carried") or b"{}"))


def _refusal(code: RefusalCode, run_id: str, call_id: str | None,
             status: bytes | None) -> str:
    if code == "not_waiting":
        state = orjson.loads(status) if status else "gone"
        return f"run {run_id} is {state}, not waiting for a decision"
    if code == "unknown_call":
        return f"run {run_id} waits for no call {call_id}"
    return f"call {call_id} was already decided"
