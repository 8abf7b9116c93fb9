"""``ParkingStore`` on both backends (real Redis): parking, answers, wakes, and ≥ 200-trial
races of an answer against a cancel, a steer and the approval timeout (exactly one wins)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import orjson
import pytest

from app.engine.events import ApprovalDecided
from app.engine.queues import QueuedMessage
from app.store import Backend, make_backend
from app.store.errors import DecisionRefused
from app.store.records import Answer, RunRecord
from providers.messages import UserMessage
from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]
TRIALS = 200
CALLS = [{"tool_call_id": "c1", "tool_name": "t", "args": {}, "kind": "approval", "index": 0},
         {"tool_call_id": "c2", "tool_name": "t", "args": {"a": []}, "kind": "approval",
          "index": 1}]


@pytest.fixture(params=["memory", "redis", "cluster"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    url = {"memory": None, "redis": "redis_url", "cluster": "cluster_url"}[request.param]
    b = make_backend(url and request.getfixturevalue(url), lease=5.0, run_ttl=3600,
                     **({"cluster": True} if request.param == "cluster" else {}))
    await b.start()
    try:
        yield b
    finally:
        await b.close()


async def parked_run(backend: Backend, n: int = 0, deadline: float | None = None) -> str:
    record = RunRecord(id=f"run_{n}_{time.time_ns()}", tenant="t", created_at=time.time())
    await backend.create_run(record)
    [claim] = await backend.claim_many("w", 5.0, 1)
    assert await backend.park(claim.run_id, claim.attempt, CALLS, deadline)
    return claim.run_id


def event(call_id: str) -> ApprovalDecided:
    return ApprovalDecided(tool_call_id=call_id, decision="approve")


async def decided_events(backend: Backend, run_id: str) -> list[str]:
    return [orjson.loads(e.data)["tool_call_id"] for e in await backend.read_events(run_id, 0)
            if e.type == "approval_decided"]


async def test_park_decide_and_wake(backend: Backend) -> None:
    run_id = await parked_run(backend)
    record = await backend.get_run(run_id)
    assert record is not None and record.status == "requires_action" and record.worker is None
    assert await backend.claim_many("w", 0.05, 5) == []  # parked: nothing to claim
    assert await backend.decide(run_id, [Answer("c2", {"kind": "deny"}, event("c2"))]) is False
    for call_id, code in (("c2", "already_decided"), ("zz", "unknown_call")):
        with pytest.raises(DecisionRefused) as refused:
            await backend.decide(run_id, [Answer(call_id, {"kind": "approve"},
                                                  event(call_id))])
        assert refused.value.code == code
    assert await backend.decide(run_id, [Answer("c1", {"kind": "approve"}, event("c1"))]) is True
    state = await backend.parked_state(run_id)
    assert state is not None and state.calls == CALLS and not state.expired
    assert state.decisions == {"c1": {"kind": "approve"}, "c2": {"kind": "deny"}}
    assert await decided_events(backend, run_id) == ["c2", "c1"]
    [claim] = await backend.claim_many("w2", 5.0, 1)
    assert claim.run_id == run_id and claim.resumed
    with pytest.raises(DecisionRefused) as late:
        await backend.decide(run_id, [Answer("c1", {"kind": "approve"}, event("c1"))])
    assert late.value.code == "not_waiting"


async def test_park_with_a_steer_or_cancel_waiting_dispatches_at_once(backend: Backend) -> None:
    for n, prepare in enumerate(("steer", "cancel")):
        record = RunRecord(id=f"run_now_{n}_{time.time_ns()}", tenant="t", created_at=time.time())
        await backend.create_run(record)
        [claim] = await backend.claim_many("w", 5.0, 1)
        if prepare == "steer":
            await backend.enqueue(record.id, "steer", QueuedMessage(
                id="m1", message=UserMessage(content="x")))
        else:
            await backend.request_cancel(record.id)
        assert await backend.park(claim.run_id, claim.attempt, CALLS, None) is False
        again = await backend.claim_many("w", 5.0, 1)
        assert [c.run_id for c in again] == [record.id]


async def test_expire_due_wakes_only_runs_past_their_deadline(backend: Backend) -> None:
    soon = await parked_run(backend, 1, deadline=time.time() - 1)
    later = await parked_run(backend, 2, deadline=time.time() + 3600)
    never = await parked_run(backend, 3)
    assert await backend.expire_due(time.time()) == [soon]
    assert await backend.expire_due(time.time()) == []
    state = await backend.parked_state(soon)
    assert state is not None and state.expired
    for run_id in (later, never):
        record = await backend.get_run(run_id)
        assert record is not None and record.status == "requires_action"



async def test_answers_given_together_are_taken_all_or_none(backend: Backend) -> None:
    run_id = await parked_run(backend)
    for bad, code in (("zz", "unknown_call"), ("c1", "already_decided")):
        with pytest.raises(DecisionRefused) as refused:  # the second is refused: neither lands
            await backend.decide(run_id, [Answer("c1", {"kind": "approve"}, event("c1")),
                                          Answer(bad, {"kind": "deny"}, event(bad))])
        assert (refused.value.code, refused.value.call_id) == (code, bad)
        state = await backend.parked_state(run_id)
        assert state is not None and state.decisions == {}
        assert await decided_events(backend, run_id) == []
    both = [Answer("c1", {"kind": "approve"}, event("c1")),
            Answer("c2", {"kind": "deny"}, event("c2"))]
    assert await backend.decide(run_id, both) is True  # the last answers: woken
    assert await decided_events(backend, run_id) == ["c1", "c2"]
    events = await backend.read_events(run_id, 0)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    [claim] = await backend.claim_many("w", 5.0, 1)
    assert claim.run_id == run_id


async def test_a_cancel_or_a_steer_wakes_a_parked_run_in_the_same_step(backend: Backend) -> None:
    for n, act in enumerate(("cancel", "steer", "follow_up")):
        run_id = await parked_run(backend, n)
        if act == "cancel":
            await backend.request_cancel(run_id)
        else:
            await backend.enqueue(run_id, act, QueuedMessage(  # type: ignore[arg-type]
                id=f"m{n}", message=UserMessage(content="x")))
        record = await backend.get_run(run_id)
        assert record is not None
        if act == "follow_up":  # a follow-up waits for the loop's end: the run keeps waiting
            assert record.status == "requires_action"
            assert await backend.claim_many("w", 0.05, 5) == []
            continue
        assert record.status == "queued" and record.cancel_requested == (act == "cancel")
        [claim] = await backend.claim_many("w", 5.0, 1)  # dispatched, exactly once
        assert claim.run_id == run_id
        await backend.finish(run_id, claim.attempt)

async def _race(backend: Backend, n: int, rival: str) -> tuple[bool, bool]:
    """One trial: the last answer against ``rival``; (answer won, rival woke the run)."""
    run_id = await parked_run(backend, n, deadline=time.time() - 1 if rival == "timeout"
                              else None)
    await backend.decide(run_id, [Answer("c1", {"kind": "approve"}, event("c1"))])

    async def jitter() -> None:  # either side may go first
        await asyncio.sleep(random.random() * 0.002)

    async def answer() -> bool:
        await jitter()
        try:
            return await backend.decide(run_id, [Answer("c2", {"kind": "approve"},
                                                         event("c2"))])
        except DecisionRefused as exc:
            assert exc.code == "not_waiting"
            return False

    async def other() -> bool:
        await jitter()
        if rival == "timeout":
            return run_id in await backend.expire_due(time.time())
        # a cancel or a steer wakes a parked run itself, in the same step
        if rival == "cancel":
            await backend.request_cancel(run_id)
        else:
            await backend.enqueue(run_id, "steer", QueuedMessage(
                id=f"m{n}", message=UserMessage(content="x")))
        return await backend.wake(run_id)  # nothing left to wake: False whoever won

    won, woke = await asyncio.gather(answer(), other())
    if rival == "timeout":
        assert won != woke, f"trial {n}: answer {won}, {rival} {woke}"
    else:
        assert woke is False
    record = await backend.get_run(run_id)
    assert record is not None and record.status == "queued"
    assert ("c2" in await decided_events(backend, run_id)) == won
    state = await backend.parked_state(run_id)
    assert state is not None and state.expired == (rival == "timeout" and woke)
    claims = await backend.claim_many("w", 5.0, 5)  # dispatched exactly once
    assert [c.run_id for c in claims] == [run_id]
    await backend.finish(run_id, claims[0].attempt)
    return won, woke


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rival", ["cancel", "steer", "timeout"])
async def test_an_answer_racing_a_rival_comes_out_one_way(backend: Backend, rival: str) -> None:
    outcomes = [await _race(backend, n, rival) for n in range(TRIALS)]
    assert {won for won, _ in outcomes} == {True, False}  # both sides won some trials


async def test_a_park_wakes_the_runs_readers(backend: Backend) -> None:
    """A reader waiting on the log wakes at the park (no event is added, the status changed):
    a dialect's stream ends there instead of after its idle poll (issue 30's 5 s stall)."""
    record = RunRecord(id=f"run_wake_{time.time_ns()}", tenant="t", created_at=time.time())
    await backend.create_run(record)
    [claim] = await backend.claim_many("w", 5.0, 1)
    last = (await backend.get_run(claim.run_id) or record).last_seq
    reader = asyncio.create_task(backend.wait_events(claim.run_id, last, 3600, parked=True))
    await asyncio.sleep(0.05)  # the reader waits (or, on a slow machine, sees the park)
    assert not reader.done()
    assert await backend.park(claim.run_id, claim.attempt, CALLS, None)
    assert await asyncio.wait_for(reader, 30) == []
    assert (await backend.get_run(claim.run_id)).status == "requires_action"  # type: ignore[union-attr]


class _Waiting:
    """A projector whose client answers every pick (as a dialect's with a pending approval)."""

    def feed(self, event: dict[str, object]) -> list[bytes]:
        return [b"e"]

    def finish(self) -> list[bytes]:
        return [b"done"]

    def waits_on_client(self) -> bool:
        return True

    def pause(self) -> list[bytes]:
        return [b"pause"]


async def test_a_projected_stream_ends_at_the_park_not_at_its_poll(backend: Backend) -> None:
    """The dialects' tail, idle with a poll of an hour, ends when the run parks."""
    from app.dialects.tail import projected_frames

    record = RunRecord(id=f"run_tail_{time.time_ns()}", tenant="t", created_at=time.time())
    await backend.create_run(record)
    [claim] = await backend.claim_many("w", 5.0, 1)
    rest = asyncio.create_task(_drain(projected_frames(backend, claim.run_id, _Waiting(),
                                                       poll=3600)))
    await asyncio.sleep(0.05)  # the tail reads the empty log and waits (nothing ends it)
    assert not rest.done()
    assert await backend.park(claim.run_id, claim.attempt, CALLS, None)
    assert await asyncio.wait_for(rest, 30) == [b"pause", b"done"]


async def _drain(frames: AsyncIterator[bytes]) -> list[bytes]:
    return [f async for f in frames]
