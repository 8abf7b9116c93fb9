"""``ParkingStore`` of the in-process backend: each method is one step on the event loop (no
await between its check and its change), which is what makes it atomic."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.store.errors import DecisionRefused
from app.store.memory.core import MemoryCore
from app.store.records import REQUIRES_ACTION, Answer, ParkedState, now


class MemoryParking(MemoryCore):
    """See ``app.store.contract.ParkingStore``."""

    async def park(self, run_id: str, attempt: int, calls: list[dict[str, Any]],
                   deadline: float | None,
                   carried: dict[str, dict[str, Any]] | None = None) -> bool:
        """See ``ParkingStore.park``."""
        record = self._fenced(run_id, attempt)
        self._parked[run_id] = ParkedState(calls=list(calls), deadline=deadline,
                                           parked_at=now(), carried=dict(carried or {}))
        self._leases.pop(run_id, None)
        record.worker = None
        if self._state[run_id].queues["steer"] or run_id in self._cancelled:
            self._dispatch(run_id)
            return False
        record.status = REQUIRES_ACTION
        self._state[run_id].wake_readers()  # a dialect's stream ends at the park
        return True

    async def decide(self, run_id: str, answers: Sequence[Answer]) -> bool:
        """See ``ParkingStore.decide``: every answer checked before any is recorded."""
        record = self._must(run_id)
        parked = self._parked.get(run_id)
        if record.status != REQUIRES_ACTION or parked is None:
            raise DecisionRefused("not_waiting", f"run {run_id} is {record.status}, not "
                                  "waiting for a decision")
        known = {c["tool_call_id"] for c in parked.calls}
        seen: set[str] = set()
        for answer in answers:
            call_id = answer.tool_call_id
            if call_id not in known:
                raise DecisionRefused("unknown_call", f"run {run_id} waits for no call "
                                      f"{call_id}", call_id)
            if call_id in parked.decisions or call_id in seen:
                raise DecisionRefused("already_decided", f"call {call_id} was already "
                                      "decided", call_id)
            seen.add(call_id)
        for answer in answers:
            parked.decisions[answer.tool_call_id] = dict(answer.decision)
            self._log(run_id, answer.event)
        last = len(parked.decisions) == len(parked.calls)
        if last:
            self._dispatch(run_id)
        return last

    async def wake(self, run_id: str) -> bool:
        """See ``ParkingStore.wake``."""
        return self._wake_parked(run_id)

    async def expire_due(self, at: float) -> list[str]:
        """See ``ParkingStore.expire_due``."""
        woken = []
        for run_id, parked in list(self._parked.items()):
            record = self._record(run_id)
            if record is None:
                self._parked.pop(run_id, None)
            elif (record.status == REQUIRES_ACTION and parked.deadline is not None
                  and parked.deadline <= at):
                parked.expired = True
                self._dispatch(run_id)
                woken.append(run_id)
        return woken

    async def parked_state(self, run_id: str) -> ParkedState | None:
        """See ``ParkingStore.parked_state``."""
        parked = self._parked.get(run_id)
        if parked is None:
            return None
        return ParkedState(calls=list(parked.calls), decisions=dict(parked.decisions),
                           deadline=parked.deadline, expired=parked.expired,
                           parked_at=parked.parked_at, carried=dict(parked.carried))
