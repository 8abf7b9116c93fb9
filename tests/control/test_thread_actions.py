"""The thread actions of the state × action table (docs/events.md, "Acting on a run"): a
thread post with each ``multitask`` (enqueue, steer, interrupt, reject) and
``DELETE /threads/{id}``, with the thread's active run queued, running, parked or ended; each
cell on both backends over a real socket."""

from __future__ import annotations

from typing import Any

import pytest

from tests.control.conftest import Table, held, until_entered
from tests.control.test_run_actions import STATES, mark, result_text, tool_ends


async def active(table: Table, state: str, m: str) -> tuple[str, dict[str, Any]]:
    """A thread whose active run is in ``state`` (``ended``: the thread is idle again)."""
    thread_id = await table.thread()
    if state == "queued":
        await table.worker_off()
    else:
        await table.worker_on()
    word = {"running": "hold", "parked": "park"}.get(state, "say")
    resp = await table.post(thread_id, f"{word} {m}")
    assert resp.status_code == 201, resp.text
    run = resp.json()
    if state == "running":
        await until_entered(m)
    elif state == "parked":
        await table.status(run["id"], "requires_action")
    elif state == "ended":
        await table.status(run["id"], "completed")
        await idle(table, thread_id)
    return thread_id, run


async def idle(table: Table, thread_id: str) -> dict[str, Any]:
    """The thread once no run is active or waiting."""
    for _ in range(3000):
        thread = (await table.client.get(f"/threads/{thread_id}")).json()
        if thread["status"] == "idle" and thread["next_run"] is None:
            return thread  # type: ignore[no-any-return]
        import asyncio
        await asyncio.sleep(0.01)
    raise AssertionError(f"thread {thread_id} stays busy")


@pytest.mark.parametrize("state", STATES)
async def test_enqueue(table: Table, state: str) -> None:
    m, later = mark(), mark()
    async with held(m):
        thread_id, run = await active(table, state, m)
        resp = await table.post(thread_id, f"then {later}", multitask="enqueue")
        if state == "ended":  # the thread is idle: a run of its own
            assert resp.status_code == 201 and resp.json()["multitask"]["action"] == "started"
            await table.status(resp.json()["id"], "completed")
            return
        assert resp.status_code == 202, resp.text
        assert resp.json()["id"] == run["id"] and resp.json()["multitask"]["action"] == "queued"
        if state == "parked":  # not woken: it still waits, the follow-up behind it
            assert (await table.run(run["id"]))["status"] == "requires_action"
            await table.client.post(f"/runs/{run['id']}/approvals", json={
                "tool_call_id": f"guard-{m}", "decision": "approve"})
    await table.worker_on()
    done = await table.status(run["id"], "completed")
    assert done["result"] == f"echo: then {later}"
    await idle(table, thread_id)


@pytest.mark.parametrize("state", STATES)
async def test_steer(table: Table, state: str) -> None:
    m, steer = mark(), mark()
    async with held(m):
        thread_id, run = await active(table, state, m)
        resp = await table.post(thread_id, f"instead {steer}", multitask="steer")
        if state == "ended":
            assert resp.status_code == 201 and resp.json()["multitask"]["action"] == "started"
            await table.status(resp.json()["id"], "completed")
            return
        assert resp.status_code == 202, resp.text
        assert resp.json()["multitask"]["action"] == "steered"
    await table.worker_on()
    done = await table.status(run["id"], "completed")
    assert done["result"] == f"echo: instead {steer}"
    ends = tool_ends(await table.events(run["id"]))
    if state == "parked":  # woken at once: the waiting pick skipped, the steer taken
        assert "Skipped due to queued user message" in result_text(ends[f"guard-{m}"])
    if state == "running":
        assert "Skipped due to queued user message" in result_text(ends[f"note-{m}"])
    assert (await idle(table, thread_id))["active_run"] is None


@pytest.mark.parametrize("state", STATES)
async def test_interrupt(table: Table, state: str) -> None:
    m, now = mark(), mark()
    async with held(m):
        thread_id, run = await active(table, state, m)
        resp = await table.post(thread_id, f"now {now}", multitask="interrupt")
        assert resp.status_code == 201, resp.text
        action = resp.json()["multitask"]["action"]
        assert action == ("started" if state == "ended" else "interrupted")
        await table.worker_on()
        if state != "ended":
            old = await table.status(run["id"], "cancelled")
            assert old["stop_reason"] == "aborted"
        new = await table.status(resp.json()["id"], "completed")
    assert new["result"] == f"echo: now {now}"
    thread = await idle(table, thread_id)
    assert thread["runs"][-1] == new["id"]
    if state == "queued":  # the interrupted run never reached the model (its input did,
        # as the history of the run that followed it)
        asked = table.provider.asked(m)
        assert len(asked) == 1 and f"now {now}" in str(asked[0].messages[-1])


@pytest.mark.parametrize("state", STATES)
async def test_reject(table: Table, state: str) -> None:
    m, other = mark(), mark()
    async with held(m):
        thread_id, run = await active(table, state, m)
        resp = await table.post(thread_id, f"say {other}", multitask="reject")
        if state == "ended":
            assert resp.status_code == 201
            await table.status(resp.json()["id"], "completed")
            return
        assert resp.status_code == 409 and resp.json()["error"]["code"] == "thread_busy"
        assert resp.headers["Location"] == f"/runs/{run['id']}"
        assert (await table.run(run["id"]))["status"] in ("queued", "running",
                                                           "requires_action")
        if state == "parked":
            await table.client.post(f"/runs/{run['id']}/approvals", json={
                "tool_call_id": f"guard-{m}", "decision": "approve"})
    await table.worker_on()
    await table.status(run["id"], "completed")
    assert not table.provider.asked(other)


@pytest.mark.parametrize("state", STATES)
async def test_delete(table: Table, state: str) -> None:
    m = mark()
    async with held(m):
        thread_id, run = await active(table, state, m)
        resp = await table.client.delete(f"/threads/{thread_id}")
        assert resp.status_code == 204, resp.text
        assert (await table.client.get(f"/threads/{thread_id}")).status_code == 404
        await table.worker_on()
        done = await table.status(run["id"], "cancelled", "completed")
    if state == "ended":  # its runs stay readable until they expire
        assert done["status"] == "completed"
    else:
        assert done["status"] == "cancelled" and done["stop_reason"] == "aborted"
        assert done["pending"] == []
    if state == "queued":
        assert not table.provider.asked(m)
    if state == "parked":
        late = await table.client.post(f"/runs/{run['id']}/approvals", json={
            "tool_call_id": f"guard-{m}", "decision": "approve"})
        assert late.status_code == 409 and late.json()["error"]["code"] == "not_waiting"
        listed = (await table.client.get("/runs", params={"status": "requires_action"})).json()
        assert run["id"] not in [r["id"] for r in listed["runs"]]
    if table.kind == "redis":  # an ended run's keys expire
        ttl = await table.server.call(table.backend.expires_in(run["id"]))
        assert ttl is not None and 0 < ttl <= 3600
