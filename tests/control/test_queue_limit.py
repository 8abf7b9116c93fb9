"""``AGENTLOOP_MAX_QUEUED_MESSAGES`` (3 on this package's server): a run holds at most that many
messages waiting to be taken, steers and follow-ups together, whichever door they came in by
(``/runs/{id}/steer`` and ``/follow_up``, a thread post, ``/ai-sdk/chat``, ``/ag-ui``). One
more is a 409 ``queue_full`` that leaves no trace (no message, no event, a parked run not
woken); room comes back as the loop takes messages or one is withdrawn. In every run state,
on both backends, over a real socket; racing clients get exactly the room there is."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.dialects.conversation import chat_thread_id
from tests.control.conftest import Table, held, until_entered
from tests.control.test_run_actions import STATES, mark, reach
from tests.control.test_thread_actions import active, idle
from tests.support.errors import api_error

LIMIT = 3
"""The package server's ``max_queued_messages`` (tests/control/conftest.py)."""


def fill_kinds(state: str) -> list[str]:
    """What fills the queue: steers and follow-ups mixed (they count together), but only
    follow-ups at a parked run, as a steer wakes it and the loop would take it at once."""
    return ["follow_up"] * LIMIT if state == "parked" else ["follow_up", "steer", "follow_up"]


async def queue_counts(table: Table, run_id: str) -> tuple[int, int]:
    run = await table.run(run_id)
    return run["queue"]["steer"], run["queue"]["follow_up"]


async def queued_events(table: Table, run_id: str) -> int:
    return sum(e["type"] == "message_queued" for e in await table.events(run_id))


def full(resp: httpx.Response, run_id: str) -> None:
    assert resp.status_code == 409, resp.text
    error = api_error(resp)
    assert error["code"] == "queue_full", error
    assert run_id in error["message"] and f"{LIMIT} messages" in error["message"], error


@pytest.mark.parametrize("state", STATES)
async def test_a_full_queue_refuses_the_next_message_in_every_state(table: Table,
                                                                   state: str) -> None:
    m = mark()
    words = [mark() for _ in range(LIMIT + 1)]
    async with held(m):
        run = await reach(table, state, m)
        run_id = run["id"]
        kinds = fill_kinds(state)
        if state == "ended":  # an ended run takes nothing: run_ended, whatever its queue
            for kind in ("steer", "follow_up"):
                resp = await table.client.post(f"/runs/{run_id}/{kind}",
                                               json={"content": "late"})
                assert resp.status_code == 409 and api_error(resp)["code"] == "run_ended"
            return
        ids = []
        for kind, word in zip(kinds, words, strict=False):
            resp = await table.client.post(f"/runs/{run_id}/{kind}",
                                           json={"content": f"then {word}"})
            assert resp.status_code == 202, resp.text
            ids.append(resp.json()["message_id"])
        before = await queue_counts(table, run_id)
        assert sum(before) == LIMIT
        events = await queued_events(table, run_id)
        for kind in ("steer", "follow_up"):
            full(await table.client.post(f"/runs/{run_id}/{kind}",
                                         json={"content": f"then {words[-1]}"}), run_id)
        assert await queue_counts(table, run_id) == before  # nothing queued, nothing logged
        assert await queued_events(table, run_id) == events
        if state == "parked":  # the refused steer did not wake it
            assert (await table.run(run_id))["status"] == "requires_action"
        # withdrawing one makes room for one
        gone = await table.client.delete(f"/runs/{run_id}/queue/{ids[0]}")
        assert gone.status_code == 204, gone.text
        last = await table.client.post(f"/runs/{run_id}/follow_up",
                                       json={"content": f"then {words[-1]}"})
        assert last.status_code == 202, last.text
        full(await table.client.post(f"/runs/{run_id}/follow_up", json={"content": "more"}),
             run_id)
        if state == "running":
            await until_entered(m)
        if state == "parked":
            ok = await table.client.post(f"/runs/{run_id}/approvals", json={
                "tool_call_id": f"guard-{m}", "decision": "approve"})
            assert ok.status_code == 202, ok.text
    await table.worker_on()
    done = await table.status(run_id, "completed")
    seen = str(done["messages"])
    assert words[0] not in seen  # withdrawn
    assert all(w in seen for w in words[1:])  # every accepted message was taken
    assert "more" not in [m.get("content") for m in done["messages"]]  # the refused one not
    assert await queue_counts(table, run_id) == (0, 0)


@pytest.mark.parametrize("state", ["queued", "running", "parked"])
async def test_thread_posts_count_against_the_active_runs_queue(table: Table,
                                                                state: str) -> None:
    m = mark()
    async with held(m):
        thread_id, run = await active(table, state, m)
        run_id = run["id"]
        for i in range(LIMIT):
            resp = await table.post(thread_id, f"then {m}-{i}", multitask="enqueue")
            assert resp.status_code == 202, resp.text
        for multitask in ("enqueue", "steer"):
            full(await table.post(thread_id, "one too many", multitask=multitask), run_id)
        # the per-run door sees the same queue
        full(await table.client.post(f"/runs/{run_id}/steer", json={"content": "x"}), run_id)
        assert await queue_counts(table, run_id) == (0, LIMIT)
        if state == "parked":
            assert (await table.run(run_id))["status"] == "requires_action"
            await table.client.post(f"/runs/{run_id}/approvals", json={
                "tool_call_id": f"guard-{m}", "decision": "approve"})
    await table.worker_on()
    await table.status(run_id, "completed")
    await idle(table, thread_id)
    thread = (await table.client.get(f"/threads/{thread_id}")).json()["messages"]
    texts = str(thread)
    assert all(f"then {m}-{i}" in texts for i in range(LIMIT))
    assert "one too many" not in texts


async def test_the_waiting_run_of_a_thread_takes_as_many_messages(table: Table) -> None:
    m = mark()
    # the active run stays queued (no worker), so the interrupt's run waits behind it
    thread_id, _ = await active(table, "queued", m)
    nxt = await table.post(thread_id, f"instead {m}", multitask="interrupt")
    assert nxt.status_code == 201 and nxt.json()["multitask"]["action"] == "interrupted"
    waiting = nxt.json()["id"]
    # the interrupt's prompt is the waiting run's first input: room for two more
    for i in range(LIMIT - 1):
        resp = await table.post(thread_id, f"and {m}-{i}", multitask="enqueue")
        assert resp.status_code == 202 and resp.json()["id"] == waiting, resp.text
    full(await table.post(thread_id, "one too many", multitask="enqueue"), waiting)
    await table.worker_on()
    await table.status(waiting, "completed")
    thread = await idle(table, thread_id)
    texts = str((await table.client.get(f"/threads/{thread_id}")).json()["messages"])
    assert all(f"and {m}-{i}" in texts for i in range(LIMIT - 1))
    assert "one too many" not in texts and thread["status"] == "idle"


def refusals() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("agentloop_limit_refusals_total",
                                     {"limit": "max_queued_messages"}) or 0.0


async def test_racing_clients_get_exactly_the_room_there_is(table: Table) -> None:
    before = refusals()
    m = mark()
    run = await reach(table, "queued", m)
    answers = await asyncio.gather(*(
        table.client.post(f"/runs/{run['id']}/{'steer' if i % 2 else 'follow_up'}",
                          json={"content": f"race {i}"}) for i in range(4 * LIMIT)))
    codes = sorted(r.status_code for r in answers)
    assert codes == [202] * LIMIT + [409] * (3 * LIMIT), codes
    assert all(api_error(r)["code"] == "queue_full" for r in answers if r.status_code == 409)
    assert sum(await queue_counts(table, run["id"])) == LIMIT
    assert await queued_events(table, run["id"]) == LIMIT
    assert refusals() - before >= 3 * LIMIT  # counted for operators
    await table.worker_on()
    await table.status(run["id"], "completed")


async def chat_post(table: Table, door: str, chat: str, text: str) -> httpx.Response:
    """A toolkit's message to its chat: the response's status and error, its stream left."""
    if door == "ai_sdk":
        body: dict[str, Any] = {"id": chat, "messages": [
            {"id": mark(), "role": "user", "parts": [{"type": "text", "text": text}]}],
            "toolset": "table_testing"}
        path = "/ai-sdk/chat"
    else:
        body = {"threadId": chat, "runId": mark(), "state": {}, "context": [], "tools": [],
                "messages": [{"id": mark(), "role": "user", "content": text}],
                "forwardedProps": {"agentloop": {"toolset": "table_testing"}}}
        path = "/ag-ui"
    async with table.client.stream("POST", path, json=body) as resp:
        if resp.status_code >= 400:
            await resp.aread()
        return resp


@pytest.mark.parametrize("door", ["ai_sdk", "ag_ui"])
async def test_a_toolkits_chat_gets_the_same_answer_in_its_own_shape(table: Table,
                                                                     door: str) -> None:
    m = mark()
    chat = f"chat-{m}"
    await table.worker_on()
    async with held(m):
        first = await chat_post(table, door, chat, f"hold {m}")
        assert first.status_code == 200
        await until_entered(m)
        thread = (await table.client.get(f"/threads/{chat_thread_id('default', chat)}")).json()
        run_id = thread["active_run"]
        for i in range(LIMIT):
            resp = await chat_post(table, door, chat, f"then {m}-{i}")
            assert resp.status_code == 200, resp.text
        refused = await chat_post(table, door, chat, "one too many")
        full(refused, run_id)
        if door == "ai_sdk":  # useChat shows the body as the error's message
            assert refused.headers["content-type"].startswith("text/plain")
        assert await queue_counts(table, run_id) == (0, LIMIT)
    await table.status(run_id, "completed")
