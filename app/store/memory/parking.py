"""``ParkingStore`` for the in-process backend (one event loop: each method runs without
yielding between its check and its change, which is what makes it atomic)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.engine.events import ApprovalDecided, ServiceEvent
from app.store.contract import now
from app.store.parking import REQUIRES_ACTION, DecisionRefused, ParkedState

if TYPE_CHECKING:
    from app.store.contract import RunRecord


class MemoryParking:
    """Mixed into ``MemoryBackend`` (which has what the block below declares)."""

    if TYPE_CHECKING:
        _runs: dict[str, RunRecord]
        _state: dict[str, Any]
        _leases: dict[str, str]
        _cancelled: set[str]

        def _fenced(self, run_id: str, attempt: int) -> RunRecord: ...
        def _must(self, run_id: str) -> RunRecord: ...
        def _record(self, run_id: str) -> RunRecord | None: ...
        def _push_job(self, run_id: str) -> None: ...
        async def append_service_event(self, run_id: str, event: ServiceEvent) -> int: ...

    def _parkings(self) -> dict[str, ParkedState]:
        found: dict[str, ParkedState] | None = getattr(self, "_parked_runs", None)
        if found is None:
            found = {}
            self._parked_runs = found
        return found

    async def park(self, run_id: str, attempt: int, calls: list[dict[str, Any]],
                   deadline: float | None,
                   carried: dict[str, dict[str, Any]] | None = None) -> bool:
        """See ``ParkingStore.park``."""
        record = self._fenced(run_id, attempt)
        self._parkings()[run_id] = ParkedState(calls=list(calls), deadline=deadline,
                                               parked_at=now(), carried=dict(carried or {}))
        self._leases.pop(run_id, None)
        record.worker = None
        if self._state[run_id].queues["steer"] or run_id in self._cancelled:
            self._dispatch(run_id)
            return False
        record.status = "requires_action"
        return True

    async def decide(self, run_id: str, tool_call_id: str, decision: dict[str, Any],
                     event: ApprovalDecided) -> bool:
        """See ``ParkingStore.decide``."""
        record = self._must(run_id)
        parked = self._parkings().get(run_id)
        if record.status != REQUIRES_ACTION or parked is None:
            raise DecisionRefused("not_waiting", f"run {run_id} is {record.status}, not "
                                  "waiting for a decision")
        if all(c["tool_call_id"] != tool_call_id for c in parked.calls):
            raise DecisionRefused("unknown_call", f"run {run_id} waits for no call "
                                  f"{tool_call_id}")
        if tool_call_id in parked.decisions:
            raise DecisionRefused("already_decided", f"call {tool_call_id} was already decided")
        parked.decisions[tool_call_id] = dict(decision)
        last = len(parked.decisions) == len(parked.calls)
        if last:
            record.status = "queued"
        await self.append_service_event(run_id, event)
        if last:
            self._dispatch(run_id)
        return last

    async def wake(self, run_id: str) -> bool:
        """See ``ParkingStore.wake``."""
        record = self._record(run_id)
        if record is None or record.status != REQUIRES_ACTION:
            return False
        self._dispatch(run_id)
        return True

    async def expire_due(self, at: float) -> list[str]:
        """See ``ParkingStore.expire_due``."""
        woken = []
        for run_id, parked in list(self._parkings().items()):
            record = self._record(run_id)
            if record is None:
                self._parkings().pop(run_id, None)
            elif (record.status == REQUIRES_ACTION and parked.deadline is not None
                  and parked.deadline <= at):
                parked.expired = True
                self._dispatch(run_id)
                woken.append(run_id)
        return woken

    async def parked_state(self, run_id: str) -> ParkedState | None:
        """See ``ParkingStore.parked_state``."""
        parked = self._parkings().get(run_id)
        if parked is None:
            return None
        return ParkedState(calls=list(parked.calls), decisions=dict(parked.decisions),
                           deadline=parked.deadline, expired=parked.expired,
                           parked_at=parked.parked_at, carried=dict(parked.carried))

    def _dispatch(self, run_id: str) -> None:
        self._runs[run_id].status = "queued"
        self._push_job(run_id)
