"""``ParkingStore`` for Redis: one Lua script per step on the run's keys (``parked``,
``decisions`` beside the record), then the global commands the scripts may not touch (a job
entry for a woken run, the ``al:parked`` deadline index). A process dying between the two
leaves a woken run without its job, as ``create_run`` can; the scripts keep every per-run
decision exactly-once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import orjson
from redis.exceptions import ResponseError

from app.engine.events import ApprovalDecided, encode_event_body, utc_now
from app.store.contract import now
from app.store.parking import DecisionRefused, ParkedState
from app.store.redis import keys
from app.store.redis.errors import guard
from app.store.redis.scripts import _PUBLISH

if TYPE_CHECKING:
    from redis.asyncio import Redis, RedisCluster

    from app.store.redis.pipeline import ScriptCalls

P = ParamSpec("P")
T = TypeVar("T")




_PRELUDE = """
local run = KEYS[1]
if redis.call('EXISTS', run) == 0 then return redis.error_reply('NOTFOUND') end
if ARGV[1] ~= '' and redis.call('HGET', run, 'attempt') ~= ARGV[1] then
  return redis.error_reply('FENCED')
end
"""

# KEYS run, parked, decisions, q steer; ARGV attempt, calls JSON, deadline ('' none), now,
# carried answers JSON
PARK = _PRELUDE + """
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[2], 'calls', ARGV[2], 'deadline', ARGV[3], 'expired', '',
  'parked_at', ARGV[4], 'carried', ARGV[5])
redis.call('HSET', run, 'worker', 'null')
local job = redis.call('HGET', run, 'job') or ''
if redis.call('LLEN', KEYS[4]) > 0 or redis.call('HGET', run, 'cancel') then
  redis.call('HSET', run, 'status', '"queued"')
  return {job, 'wake'}
end
redis.call('HSET', run, 'status', '"requires_action"')
return {job, 'parked'}
"""

# KEYS run, parked, decisions, events; ARGV '', call id, decision, type, body, channel, note
DECIDE = _PRELUDE + _PUBLISH + """
local status = redis.call('HGET', run, 'status')
if status ~= '"requires_action"' then return {'not_waiting', status} end
local calls = cjson.decode(redis.call('HGET', KEYS[2], 'calls') or '[]')
local known = false
for _, c in ipairs(calls) do if c['tool_call_id'] == ARGV[2] then known = true end end
if not known then return {'unknown_call', status} end
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then return {'already_decided', status} end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
local seq = redis.call('HINCRBY', run, 'last_seq', 1)
local data = '{"seq":' .. seq .. ',' .. string.sub(ARGV[5], 2)
redis.call('XADD', KEYS[4], seq .. '-0', 't', ARGV[4], 'd', data)
publish(ARGV[6], ARGV[7] .. ':' .. seq .. ':' .. seq .. '\\n' .. seq .. '\\t'
  .. ARGV[4] .. '\\t' .. data)
if redis.call('HLEN', KEYS[3]) >= #calls then
  redis.call('HSET', run, 'status', '"queued"')
  return {'woken', status}
end
return {'recorded', status}
"""

# KEYS run, parked; ARGV '', expire-at ('' : wake now). Returns 1 when the run was woken.
WAKE = _PRELUDE + """
if redis.call('HGET', run, 'status') ~= '"requires_action"' then return 0 end
if ARGV[2] ~= '' then
  local deadline = redis.call('HGET', KEYS[2], 'deadline')
  if not deadline or deadline == '' or tonumber(deadline) > tonumber(ARGV[2]) then return 0 end
  redis.call('HSET', KEYS[2], 'expired', '1')
end
redis.call('HSET', run, 'status', '"queued"')
return 1
"""


class RedisParking:
    """Mixed into ``RedisBackend`` (which has what the block below declares)."""

    if TYPE_CHECKING:
        client: Redis | RedisCluster
        _pipeline: ScriptCalls

        async def _drop_job(self, entry_id: bytes | str) -> None: ...

        def _channel(self, run_id: str) -> str: ...

    async def _park_script(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        scripts: dict[str, Any] | None = getattr(self, "_parking_scripts", None)
        if scripts is None:
            scripts = {n: self.client.register_script(globals()[n])
                       for n in ("PARK", "DECIDE", "WAKE")}
            self._parking_scripts = scripts
        return await self._pipeline.call(scripts[name], keys_, args)

    @guard
    async def park(self, run_id: str, attempt: int, calls: list[dict[str, Any]],
                   deadline: float | None,
                   carried: dict[str, dict[str, Any]] | None = None) -> bool:
        """See ``ParkingStore.park``."""
        job, outcome = await self._park_script(
            "PARK", [keys.run_key(run_id), keys.parked_key(run_id), keys.decisions_key(run_id),
                     keys.queue_key(run_id, "steer")],
            [attempt, orjson.dumps(calls), "" if deadline is None else repr(deadline),
             repr(now()), orjson.dumps(carried or {})])
        if outcome == b"wake":
            await self._wake(run_id)
        elif deadline is not None:
            await self.client.zadd(keys.PARKED_INDEX, {run_id: deadline})
        await self._drop_job(job.decode())
        return bool(outcome == b"parked")

    @guard
    async def decide(self, run_id: str, tool_call_id: str, decision: dict[str, Any],
                     event: ApprovalDecided) -> bool:
        """See ``ParkingStore.decide``."""
        body = encode_event_body(event, run_id=run_id, ts=utc_now())
        answer, status = await self._park_script(
            "DECIDE", [keys.run_key(run_id), keys.parked_key(run_id), keys.decisions_key(run_id),
                       keys.events_key(run_id)],
            ["", tool_call_id, orjson.dumps(decision), event.type, body, self._channel(run_id),
             f"e:{run_id}"])
        answer = answer.decode()
        if answer in ("not_waiting", "unknown_call", "already_decided"):
            raise DecisionRefused(answer, _refusal(answer, run_id, tool_call_id, status))
        if answer == "woken":
            await self._wake(run_id)
        return bool(answer == "woken")

    @guard
    async def wake(self, run_id: str) -> bool:
        """See ``ParkingStore.wake``."""
        woken = await self._park_script("WAKE", [keys.run_key(run_id), keys.parked_key(run_id)],
                                        ["", ""])
        if woken:
            await self._wake(run_id)
        return bool(woken)

    @guard
    async def expire_due(self, at: float) -> list[str]:
        """See ``ParkingStore.expire_due``."""
        due: Any = await self.client.zrangebyscore(keys.PARKED_INDEX, "-inf", at)
        woken = []
        for raw in due:
            run_id = raw.decode()
            try:
                hit = await self._park_script(
                    "WAKE", [keys.run_key(run_id), keys.parked_key(run_id)], ["", repr(at)])
            except ResponseError as exc:  # the run expired from the store meanwhile
                if "NOTFOUND" not in str(exc):
                    raise
                hit = 0
            if hit:
                await self._wake(run_id)
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

    async def _wake(self, run_id: str) -> None:
        await self.client.xadd(keys.JOBS_STREAM, {"run": run_id})
        await self.client.zrem(keys.PARKED_INDEX, run_id)


def _refusal(code: str, run_id: str, call_id: str, status: bytes | None) -> str:
    if code == "not_waiting":
        state = orjson.loads(status) if status else "gone"
        return f"run {run_id} is {state}, not waiting for a decision"
    if code == "unknown_call":
        return f"run {run_id} waits for no call {call_id}"
    return f"call {call_id} was already decided"

