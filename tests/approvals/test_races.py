"""An answer racing a cancel or a steer over HTTP, watched by a real SSE client, on both
backends: exactly one wins and the stream shows which. ``AGENTLOOP_RACE_TRIALS`` trials per
case (200 by default)."""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import pytest

from providers import fake
from providers.base import ModelRequest
from providers.fake import Step
from tests.api.conftest import Api
from tests.approvals.helpers import decide, parked
from tests.support.sse_client import open_stream, read_all

TRIALS = int(os.environ.get("AGENTLOOP_RACE_TRIALS", "200"))
SKIPPED = "Skipped due to queued user message."
ABORTED = "Tool execution aborted: the run was cancelled."


def pick_then_answer(request: ModelRequest) -> Step:
    if any(m.role == "tool_result" for m in request.messages):
        return fake.text("done")
    return fake.tool_calls(("hitl_delete", {"path": "p"}, "c1"))


async def _jittered(coro: Any) -> Any:
    await asyncio.sleep(random.random() * 0.003)  # either request may reach the server first
    return await coro


async def _race(api: Api, call_id: str, rival: str) -> tuple[bool, list[Any], Any]:
    """Start a run, wait until it parks on ``call_id``, then send the answer and the ``rival``
    (cancel or steer) at once: whether the answer won, the run's frames, its one ``agent_end``
    (the last frame)."""
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    url = f"/runs/{run['id']}/{rival}"
    body = {"content": "changed my mind"} if rival == "steer" else None
    answer, other = await asyncio.gather(
        _jittered(decide(api, run["id"], call_id)), _jittered(api.client.post(url, json=body)))
    won = answer.status_code == 202
    if not won:
        assert answer.status_code == 409 and answer.json()["error"]["code"] == "not_waiting"
    late = other.status_code == 409 and other.json()["error"]["code"] == "run_ended"
    assert other.status_code == 202 or (won and late), other.text  # a steer after the end
    frames = await read_all(api.client, run["events_url"])
    ends = [f for f in frames if f.event == "agent_end" and f.data["depth"] == 0]
    assert len(ends) == 1 and frames[-1] is ends[0]
    return won, frames, ends[0]


async def _trial(api: Api, rival: str) -> bool:
    won, frames, end = await _race(api, "c1", rival)
    decided = [f for f in frames if f.event == "approval_decided"]
    result = next(f.data for f in frames if f.event == "tool_execution_end")
    text = result["result"]["content"][0]["text"]
    if won:
        assert len(decided) == 1 and frames.index(decided[0]) < frames.index(end)
        assert text in ("deleted p", ABORTED)  # a cancel that came after may stop it
    else:
        assert decided == [] and text == (ABORTED if rival == "cancel" else SKIPPED)
        expected = "aborted" if rival == "cancel" else "stop"
        assert end.data["stop_reason"] == expected
    return won


@pytest.mark.timeout(600)
@pytest.mark.parametrize("rival", ["cancel", "steer"])
async def test_an_answer_racing_cancel_or_steer(api: Api, rival: str) -> None:
    api.fake.script = [pick_then_answer]
    api.fake.repeat = True
    outcomes = [await _trial(api, rival) for _ in range(TRIALS)]
    print(f"{rival}: the answer won {sum(outcomes)} of {TRIALS}")


def nested_pick_then_answer(request: ModelRequest) -> Step:
    """The run's loop picks the subagent; its nested loop (prompt "inner") picks hitl_delete."""
    answered = any(m.role == "tool_result" for m in request.messages)
    if request.messages[0].content == "inner":
        return fake.text("inner done") if answered else fake.tool_calls(
            ("hitl_delete", {"path": "p"}, "n1"))
    return fake.text("done") if answered else fake.tool_calls(
        ("hitl_subagent", {"task": "inner"}, "o1"))


async def _nested_trial(api: Api, rival: str) -> bool:
    won, frames, end = await _race(api, "n1", rival)
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    results = {f.data["tool_call_id"]: f.data["result"]["content"][0]["text"]
               for f in frames if f.event == "tool_execution_end"}
    starts = [f.data["tool_call_id"] for f in frames if f.event == "tool_execution_start"]
    assert sorted(starts) == sorted(results) == ["n1", "o1"], [  # each started and ended once
        (f.event, f.data.get("depth"), f.data.get("tool_call_id")) for f in frames]
    decided = [f for f in frames if f.event == "approval_decided"]
    if won:
        assert len(decided) == 1 and frames.index(decided[0]) < frames.index(end)
        assert results["n1"] in ("deleted p", ABORTED)  # a cancel that came after may stop it
    else:
        skipped = ABORTED if rival == "cancel" else SKIPPED
        assert decided == [] and results == {"n1": skipped, "o1": skipped}
    return won


@pytest.mark.timeout(900)
@pytest.mark.parametrize("rival", ["cancel", "steer"])
async def test_an_answer_for_a_nested_pick_racing_cancel_or_steer(api: Api, rival: str) -> None:
    api.fake.script = [nested_pick_then_answer]
    api.fake.repeat = True
    outcomes = [await _nested_trial(api, rival) for _ in range(TRIALS)]
    print(f"nested, {rival}: the answer won {sum(outcomes)} of {TRIALS}")


async def _while_parking(api: Api, rival: str) -> None:
    run = await api.create(input="go", toolset="hitl_testing")
    body = {"content": "no, wait"} if rival == "steer" else None
    async with open_stream(api.client, run["events_url"]) as stream:
        frames = []
        async for frame in stream:
            frames.append(frame)
            if frame.event == "approval_requested":  # the run is parking right now
                resp = await api.client.post(f"/runs/{run['id']}/{rival}", json=body)
                assert resp.status_code == 202
    result = next(f.data for f in frames if f.event == "tool_execution_end")
    text, reason = (SKIPPED, "stop") if rival == "steer" else (ABORTED, "aborted")
    assert result["result"]["content"][0]["text"] == text
    assert [f.event for f in frames].count("agent_end") == 1
    assert frames[-1].event == "agent_end" and frames[-1].data["stop_reason"] == reason


@pytest.mark.timeout(600)
@pytest.mark.parametrize("rival", ["cancel", "steer"])
async def test_a_steer_or_cancel_while_the_run_parks_is_never_lost(api: Api, rival: str) -> None:
    api.fake.script = [pick_then_answer]
    api.fake.repeat = True
    for _ in range(max(TRIALS // 4, 1)):
        await _while_parking(api, rival)


@pytest.fixture(params=["memory", "redis"])
async def idle_api(request: pytest.FixtureRequest) -> Any:
    """The server without a worker (the test plays the worker), over each backend."""
    from app.store import make_backend
    from tests.api.conftest import serve

    backend = None
    if request.param == "redis":
        backend = make_backend(request.getfixturevalue("redis_url"), lease=5.0, run_ttl=3600)
    async with serve(backend=backend, worker=False) as running:
        yield running


async def _requested_not_parked(api: Api, call_id: str) -> tuple[str, int]:
    """A run whose worker wrote ``approval_requested`` for ``call_id`` and has not parked yet:
    (run id, attempt)."""
    from app.engine.events import ApprovalRequested
    from tests.api.test_events import append

    run = await api.create(input="go", tools=["hitl_delete"], approval=["hitl_delete"])
    claim = await api.call(api.backend.claim("w", 5.0))
    await append(api, run["id"], ApprovalRequested(tool_call_id=call_id, tool_name="hitl_delete",
                                                    args={"path": "p"}))
    return run["id"], claim.attempt


async def test_an_answer_racing_the_park_waits_for_it(idle_api: Api) -> None:
    """A client answering the moment ``approval_requested`` reaches it (the status is written
    after the event) gets its 202 once the run parks, not a 409 ``not_waiting``."""
    run_id, attempt = await _requested_not_parked(idle_api, "c1")
    answer = asyncio.create_task(decide(idle_api, run_id, "c1"))
    await asyncio.sleep(0.1)  # the answer is in: it waits for the park (nothing else ends it)
    assert not answer.done()
    calls = [{"tool_call_id": "c1", "tool_name": "hitl_delete", "args": {"path": "p"},
              "kind": "approval", "index": 0}]
    assert await idle_api.call(idle_api.backend.park(run_id, attempt, calls, None))
    resp = await asyncio.wait_for(answer, 30)
    assert resp.status_code == 202, resp.text
    assert (await idle_api.get(run_id))["status"] == "queued"  # woken by its last answer


async def test_an_answer_to_a_call_the_log_never_asked_for_is_refused_at_once(
        idle_api: Api) -> None:
    run_id, _ = await _requested_not_parked(idle_api, "c1")
    resp = await asyncio.wait_for(decide(idle_api, run_id, "c2"), 5)  # no 5 s park wait
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_waiting"
