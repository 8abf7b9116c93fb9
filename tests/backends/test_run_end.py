"""The run's end is atomic with its queues and its log (issue 9 item 1), on both backends:
enqueue writes its ``message_queued`` in the same step and is refused once the queues are
closed; closing fails while a message waits; no event is taken after the terminal status."""

from __future__ import annotations

import orjson
import pytest

from app.store import Backend, EventBatch, RunEnded
from tests.backends.helpers import created_and_claimed, msg


async def test_enqueue_writes_its_event_in_the_same_step(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    before = len(await backend.read_events(claim.run_id, 0))
    await backend.enqueue(claim.run_id, "follow_up", msg("f1"))
    log = await backend.read_events(claim.run_id, 0)
    assert len(log) == before + 1 and log[-1].type == "message_queued"
    assert orjson.loads(log[-1].data)["message_id"] == "f1"


async def test_close_fails_while_a_message_waits_then_refuses_new_ones(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    await backend.enqueue(rid, "steer", msg("s1"))
    assert await backend.close_queues(rid, claim.attempt) is False
    await backend.take(rid, "steer", "all", attempt=claim.attempt)
    assert await backend.close_queues(rid, claim.attempt) is True
    for kind in ("steer", "follow_up"):
        with pytest.raises(RunEnded):
            await backend.enqueue(rid, kind, msg(f"late-{kind}"))
    assert await backend.list_queue(rid) == []
    assert [e.type for e in await backend.read_events(rid, 0)].count("message_queued") == 1


async def test_no_event_and_no_message_after_the_end(backend: Backend) -> None:
    claim = await created_and_claimed(backend)
    rid = claim.run_id
    await backend.enqueue(rid, "follow_up", msg("kept"))
    end = EventBatch(events=[("agent_end", b'{"type":"agent_end"}')],
                     fields={"status": "cancelled"})
    last = await backend.append_events(rid, claim.attempt, end)
    with pytest.raises(RunEnded):
        await backend.append_events(rid, None, EventBatch(events=[("x", b'{"type":"x"}')]))
    with pytest.raises(RunEnded):
        await backend.enqueue(rid, "steer", msg("late"))
    with pytest.raises(RunEnded):  # the ended run's queue stays as it was
        await backend.withdraw(rid, "kept")
    await backend.append_events(rid, claim.attempt, EventBatch(fields={"result": "r"}))
    assert (await backend.read_events(rid, 0))[-1].seq == last
