"""The time-outs of the state × action table (docs/events.md, "Acting on a run"): a run's
deadline (``timeout``) and its ``approval_timeout`` passing while the run is queued, running,
parked or ended; each cell on both backends over a real socket.

A deadline counts the run's own time, from its first start: time spent queued or parked
(waiting for people) is free. These cells wait real seconds, as a deadline must: each waits
about twice its limit, and a run's own work (a few model calls to a local fake) stays well
under it even on a loaded machine.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.control.conftest import Table, held
from tests.control.test_run_actions import STATES, mark, reach, result_text, tool_ends

LIMIT = 1.5
"""A deadline (s): long enough for a run's own steps under load, short for the suite."""


async def past(since: float, seconds: float) -> None:
    """Until ``seconds`` have passed since ``since`` (monotonic)."""
    await asyncio.sleep(max(0.0, since + seconds - time.monotonic()))


@pytest.mark.parametrize("state", STATES)
async def test_run_deadline(table: Table, state: str) -> None:
    m = mark()
    async with held(m):
        start = time.monotonic()
        run = await reach(table, state, m, timeout=LIMIT)
        if state == "running":  # held past its deadline: stopped
            done = await table.status(run["id"], "failed", within=30 + LIMIT)
            assert done["stop_reason"] == "error" and "timed out" in done["error"]
            ends = tool_ends(await table.events(run["id"]))
            assert "deadline" in result_text(ends[f"hold-{m}"])
            return
        await past(start, 2 * LIMIT)  # queued, parked or ended all that time
        if state == "parked":
            assert (await table.run(run["id"]))["status"] == "requires_action"
            ok = await table.client.post(f"/runs/{run['id']}/approvals", json={
                "tool_call_id": f"guard-{m}", "decision": "approve"})
            assert ok.status_code == 202, ok.text
        await table.worker_on()
        done = await table.status(run["id"], "completed")
    assert done["stop_reason"] == "stop" and done["error"] is None


@pytest.mark.parametrize("state", STATES)
async def test_approval_timeout(table: Table, state: str) -> None:
    m = mark()
    limit = LIMIT / 3
    async with held(m):
        start = time.monotonic()
        run = await reach(table, state, m, approval_timeout=limit)
        if state == "parked":  # nobody answered: woken, the pick denied with the reason
            done = await table.status(run["id"], "completed", within=30)
            end = tool_ends(await table.events(run["id"]))[f"guard-{m}"]
            assert end["is_error"] and "Approval timed out" in result_text(end)
            assert done["result"].startswith("done: Approval timed out")
            return
        await past(start, 3 * limit)  # it applies to parked runs only
        if state == "running":
            assert (await table.run(run["id"]))["status"] == "running"
    await table.worker_on()
    done = await table.status(run["id"], "completed")
    assert done["stop_reason"] == "stop"
