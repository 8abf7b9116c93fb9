"""The per-run actions of the state × action table (docs/events.md, "Acting on a run"): cancel,
steer, follow-up, withdraw, approve and a client tool's result, on a run that is queued,
running, parked (``requires_action``) or ended; each cell on both backends over a real socket.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.control.conftest import CLIENT_TOOL, Table, held, until_entered

STATES = ["queued", "running", "parked", "ended"]


def mark() -> str:
    """A word no other run's input has."""
    return f"m{uuid.uuid4().hex[:10]}"


async def reach(table: Table, state: str, m: str, **body: Any) -> dict[str, Any]:
    """A run in ``state`` (for ``running``, inside ``hold <m>`` until the test opens it)."""
    if state == "queued":
        await table.worker_off()
        return await table.create(f"say {m}", **body)
    await table.worker_on()
    if state == "running":
        run = await table.create(f"hold {m}", **body)
        await until_entered(m)
        return run
    if state == "parked":
        run = await table.create(f"park {m}", **body)
        return await table.status(run["id"], "requires_action")
    run = await table.create(f"say {m}", **body)
    return await table.status(run["id"], "completed")


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def tool_ends(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["tool_call_id"]: e for e in events if e["type"] == "tool_execution_end"}


def result_text(end: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in end["result"]["content"])


@pytest.mark.parametrize("state", STATES)
async def test_cancel(table: Table, state: str) -> None:
    m = mark()
    async with held(m):
        run = await reach(table, state, m)
        resp = await table.client.post(f"/runs/{run['id']}/cancel")
        assert resp.status_code == 202, resp.text
        await table.worker_on()
        done = await table.status(run["id"], "cancelled", "completed")
    if state == "ended":  # a no-op: it stays as it ended
        assert done["status"] == "completed" and done["stop_reason"] == "stop"
        return
    assert done["status"] == "cancelled" and done["stop_reason"] == "aborted"
    events = await table.events(run["id"])
    assert types(events)[-1] == "agent_end"
    if state == "queued":  # ended at its start: the model was never asked
        assert not table.provider.asked(m)
    if state == "parked":  # the pick that waited never ran, and nothing waits any more
        assert done["pending"] == []
        end = tool_ends(events)[f"guard-{m}"]
        assert end["is_error"] and "aborted" in result_text(end)
        late = await table.client.post(f"/runs/{run['id']}/approvals", json={
            "tool_call_id": f"guard-{m}", "decision": "approve"})
        assert late.status_code == 409 and late.json()["error"]["code"] == "not_waiting"


@pytest.mark.parametrize("state", STATES)
async def test_steer(table: Table, state: str) -> None:
    m, steer = mark(), mark()
    async with held(m):
        run = await reach(table, state, m)
        resp = await table.client.post(f"/runs/{run['id']}/steer",
                                       json={"content": f"instead {steer}"})
        if state == "ended":
            assert resp.status_code == 409 and resp.json()["error"]["code"] == "run_ended"
            return
        assert resp.status_code == 202, resp.text
        if state == "running":
            await until_entered(m)
    # the gate is open: a held tool ends; then the steer goes in
    await table.worker_on()
    done = await table.status(run["id"], "completed")
    assert done["result"] == f"echo: instead {steer}"
    events = await table.events(run["id"])
    ends = tool_ends(events)
    if state == "running":  # the running tool finished; the turn's other pick was skipped
        assert result_text(ends[f"hold-{m}"]) == f"held {m}"
        assert "Skipped due to queued user message" in result_text(ends[f"note-{m}"])
    if state == "parked":  # woken at once: its waiting pick was skipped, not run
        assert "Skipped due to queued user message" in result_text(ends[f"guard-{m}"])
        assert done["pending"] == []
    if state == "queued":  # taken before the first model call
        first = table.provider.asked(steer)[0]
        assert f"say {m}" in str(first.messages) and len(table.provider.asked(m)) == 1


@pytest.mark.parametrize("state", STATES)
async def test_follow_up(table: Table, state: str) -> None:
    m, later = mark(), mark()
    async with held(m):
        run = await reach(table, state, m)
        resp = await table.client.post(f"/runs/{run['id']}/follow_up",
                                       json={"content": f"then {later}"})
        if state == "ended":
            assert resp.status_code == 409 and resp.json()["error"]["code"] == "run_ended"
            return
        assert resp.status_code == 202, resp.text
        if state == "parked":  # a follow-up does not wake a parked run
            waiting = await table.run(run["id"])
            assert waiting["status"] == "requires_action" and waiting["queue"]["follow_up"] == 1
            ok = await table.client.post(f"/runs/{run['id']}/approvals", json={
                "tool_call_id": f"guard-{m}", "decision": "approve"})
            assert ok.status_code == 202, ok.text
    await table.worker_on()
    done = await table.status(run["id"], "completed")
    assert done["result"] == f"echo: then {later}"  # taken when the loop would stop
    events = await table.events(run["id"])
    if state == "running":
        assert result_text(tool_ends(events)[f"note-{m}"]) == "noted after"  # nothing skipped
    if state == "parked":
        assert result_text(tool_ends(events)[f"guard-{m}"]) == f"guarded {m}"


@pytest.mark.parametrize("state", STATES)
async def test_withdraw(table: Table, state: str) -> None:
    m, later = mark(), mark()
    async with held(m):
        run = await reach(table, state if state != "ended" else "parked", m)
        queued = await table.client.post(f"/runs/{run['id']}/follow_up",
                                         json={"content": f"then {later}"})
        message_id = queued.json()["message_id"]
        if state == "ended":  # a run that ended with a message waiting keeps it as it was
            await table.client.post(f"/runs/{run['id']}/cancel")
            await table.status(run["id"], "cancelled")
            resp = await table.client.delete(f"/runs/{run['id']}/queue/{message_id}")
            assert resp.status_code == 409 and resp.json()["error"]["code"] == "run_ended"
            return
        resp = await table.client.delete(f"/runs/{run['id']}/queue/{message_id}")
        assert resp.status_code == 204, resp.text
        again = await table.client.delete(f"/runs/{run['id']}/queue/{message_id}")
        assert again.status_code == 404
        if state == "parked":
            assert (await table.run(run["id"]))["status"] == "requires_action"
            await table.client.post(f"/runs/{run['id']}/approvals", json={
                "tool_call_id": f"guard-{m}", "decision": "approve"})
    await table.worker_on()
    done = await table.status(run["id"], "completed")
    assert later not in str(done["messages"]) and not table.provider.asked(later)


@pytest.mark.parametrize("kind", ["approval", "client_tool"])
@pytest.mark.parametrize("state", STATES)
async def test_answer(table: Table, state: str, kind: str) -> None:
    m = mark()
    body: dict[str, Any] = {"client_tools": [CLIENT_TOOL]}
    if kind == "client_tool" and state == "parked":
        await table.worker_on()
        run = await table.create(f"client {m}", **body)
        await table.status(run["id"], "requires_action")
        call = f"ask-{m}"
    else:
        run = await reach(table, state, m, **body)
        call = f"guard-{m}"
    async with held(m):
        if kind == "approval":
            resp = await table.client.post(f"/runs/{run['id']}/approvals", json={
                "tool_call_id": call, "decision": "approve"})
        else:
            resp = await table.client.post(f"/runs/{run['id']}/tool_results", json={
                "tool_call_id": call, "content": "the page says 42"})
        if state != "parked":
            assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_waiting"
            await table.worker_on()
            return
        assert resp.status_code == 202, resp.text
    done = await table.status(run["id"], "completed")
    expected = f"guarded {m}" if kind == "approval" else "the page says 42"
    assert done["result"] == f"done: {expected}"
