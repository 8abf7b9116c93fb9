"""What happens when a steer, a follow-up, a cancel or the approval timeout meets a waiting
run (the table in docs/events.md), over HTTP on both backends with real SSE clients."""

from __future__ import annotations

from providers import fake
from tests.api.conftest import Api
from tests.approvals.helpers import (
    Watch,
    decide,
    parked,
    results_sent,
    types,
    user_texts,
)

SKIPPED = "Skipped due to queued user message."
ABORTED = "Tool execution aborted: the run was cancelled."


def two_deletes() -> fake.Step:
    return fake.tool_calls(("hitl_delete", {"path": "a"}, "c1"),
                           ("hitl_delete", {"path": "b"}, "c2"))


async def test_steer_while_waiting_skips_the_picks_and_goes_on(api: Api) -> None:
    api.fake.script = [two_deletes(), fake.text("steered")]
    run = await api.create(input="go", toolset="hitl_testing")
    watch = Watch(api, run["id"])
    await parked(api, run["id"])
    assert (await decide(api, run["id"], "c1")).status_code == 202  # answers given so far too
    resp = await api.client.post(f"/runs/{run['id']}/steer", json={"content": "stop, do X"})
    assert resp.status_code == 202
    frames = await watch.done()
    ends = [(f.data["tool_call_id"], f.data["is_error"], f.data["result"]["content"][0]["text"])
            for f in frames if f.event == "tool_execution_end"]
    assert ends == [("c1", True, SKIPPED), ("c2", True, SKIPPED)]
    assert user_texts(api.fake.requests[1])[-1] == "stop, do X"
    assert types(frames).count("agent_end") == 1
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "steered"
    late = await decide(api, run["id"], "c2")
    assert late.status_code == 409 and late.json()["error"]["code"] == "not_waiting"


async def test_follow_up_while_waiting_is_kept_until_the_loop_would_stop(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_delete", {"path": "a"}, "c1")),
                       fake.text("first"), fake.text("second")]
    run = await api.create(input="q1", toolset="hitl_testing")
    await parked(api, run["id"])
    resp = await api.client.post(f"/runs/{run['id']}/follow_up", json={"content": "q2"})
    assert resp.status_code == 202
    still = await api.get(run["id"])
    assert still["status"] == "requires_action" and still["queue"]["follow_up"] == 1
    assert (await decide(api, run["id"], "c1")).status_code == 202
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "second"
    assert user_texts(api.fake.requests[1]) == ["q1"]
    assert user_texts(api.fake.requests[2]) == ["q1", "q2"]
    assert results_sent(api.fake.requests[1]) == [("c1", False, "deleted a")]


async def test_cancel_while_waiting_aborts_with_one_agent_end(api: Api) -> None:
    api.fake.script = [two_deletes()]
    run = await api.create(input="go", toolset="hitl_testing")
    watch = Watch(api, run["id"])
    await parked(api, run["id"])
    assert (await api.client.post(f"/runs/{run['id']}/cancel")).status_code == 202
    frames = await watch.done()
    assert types(frames).count("agent_end") == 1
    assert frames[-1].event == "agent_end" and frames[-1].data["stop_reason"] == "aborted"
    ends = [(f.data["tool_call_id"], f.data["result"]["content"][0]["text"])
            for f in frames if f.event == "tool_execution_end"]
    assert ends == [("c1", ABORTED), ("c2", ABORTED)]
    done = await api.wait_status(run["id"], "cancelled")
    assert done["stop_reason"] == "aborted" and done["pending"] == []
    late = await decide(api, run["id"], "c1")
    assert late.status_code == 409 and late.json()["error"]["code"] == "not_waiting"
    assert api.fake.calls == 1


async def test_approval_timeout_denies_the_unanswered_picks(api: Api) -> None:
    api.fake.script = [two_deletes(), fake.tool_calls(("hitl_delete", {"path": "c"}, "c3")),
                       fake.text("after the timeout")]
    run = await api.create(input="go", toolset="hitl_testing", approval_timeout=2.0)
    watch = Watch(api, run["id"])
    await parked(api, run["id"])
    early = await decide(api, run["id"], "c1")  # races the timeout: either outcome is valid
    await watch.until("tool_execution_end")
    again = await parked(api, run["id"])  # a later turn's pick is asked for, not denied
    assert [p["tool_call_id"] for p in again["pending"]] == ["c3"]
    assert (await decide(api, run["id"], "c3")).status_code == 202
    frames = await watch.done()
    ends = {f.data["tool_call_id"]: f.data for f in frames if f.event == "tool_execution_end"}
    c2 = ends["c2"]["result"]["content"][0]["text"]
    assert ends["c2"]["is_error"] and "approval_timeout" in c2 and "2 s" in c2
    if early.status_code == 202:
        assert ends["c1"]["is_error"] is False
        assert "approval_decided" in types(frames)
    else:
        assert early.json()["error"]["code"] == "not_waiting"
        assert ends["c1"]["is_error"] and "approval_timeout" in \
            ends["c1"]["result"]["content"][0]["text"]
        assert "approval_decided" not in types(frames)
    assert ends["c3"]["is_error"] is False
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "after the timeout"
    late = await decide(api, run["id"], "c2")
    assert late.status_code == 409 and late.json()["error"]["code"] == "not_waiting"
