"""A nested loop (``runtime.exec`` in a tool body) that picks a tool needing approval parks
the whole run, over HTTP on both backends with real SSE clients: the event and the Run say how
deep and under which call; answers go through the same endpoint; on waking, the tool body runs
again and its nested loop goes on from the log (no model call repeated, no event sent twice)."""

from __future__ import annotations

import asyncio
from typing import Any

from providers import fake
from tests.api.conftest import Api
from tests.approvals.helpers import (
    RAN,
    Watch,
    decide,
    parked,
    results_sent,
    types,
    user_texts,
)

SKIPPED = "Skipped due to queued user message."
ABORTED = "Tool execution aborted: the run was cancelled."


def nested_script(*after: fake.ScriptItem) -> list[fake.ScriptItem]:
    """Outer picks the subagent, whose loop picks hitl_delete (needs approval), then ``after``."""
    return [fake.tool_calls(("hitl_subagent", {"task": "inner task"}, "o1")),
            fake.tool_calls(("hitl_delete", {"path": "deep"}, "n1")), *after]


def check_log(frames: list[Any]) -> None:
    """Seqs gapless and unique; every tool call started once and ended once; one depth-0
    ``agent_end``; every nested event names its depth and parent."""
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    starts = [f.data["tool_call_id"] for f in frames if f.event == "tool_execution_start"]
    ends = [f.data["tool_call_id"] for f in frames if f.event == "tool_execution_end"]
    assert sorted(starts) == sorted(set(starts)) == sorted(ends), (starts, ends)
    assert [f.data.get("depth", 0) for f in frames if f.event == "agent_end"].count(0) == 1
    assert types(frames).count("agent_start") == 2  # the run's and the nested loop's, once each
    for f in frames:
        if f.data.get("depth"):
            assert f.data["parent_tool_call_id"] == "o1", f


def nested_ran() -> list[str]:
    return [name for name, _ in RAN if name in ("hitl_subagent", "hitl_delete")]


async def test_a_nested_pick_parks_the_whole_run_and_approve_continues(api: Api) -> None:
    RAN.clear()
    api.fake.script = nested_script(fake.text("inner done"), fake.text("outer done"))
    run = await api.create(input="go", toolset="hitl_testing")
    watch = Watch(api, run["id"])
    asked = await watch.until("approval_requested")
    assert asked.data["tool_call_id"] == "n1" and asked.data["tool_name"] == "hitl_delete"
    assert asked.data["depth"] == 1 and asked.data["parent_tool_call_id"] == "o1"
    waiting = await parked(api, run["id"])
    assert waiting["pending"] == [{"tool_call_id": "n1", "tool_name": "hitl_delete",
                                   "args": {"path": "deep"}, "kind": "approval",
                                   "decided": False, "depth": 1, "parent_tool_call_id": "o1"}]
    stored = await api.call(api.backend.get_run(run["id"]))
    assert stored.worker is None  # held by no worker
    listed = (await api.client.get("/runs", params={"status": "requires_action"})).json()
    assert run["id"] in [r["id"] for r in listed["runs"]]
    assert nested_ran() == ["hitl_subagent"] and api.fake.calls == 2
    resp = await decide(api, run["id"], "n1")
    assert resp.status_code == 202, resp.text
    frames = await watch.done()
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "outer done"
    # the body ran again (documented), the approved tool once, no model call was repeated
    assert nested_ran() == ["hitl_subagent", "hitl_subagent", "hitl_delete"]
    assert api.fake.calls == 4
    assert user_texts(api.fake.requests[1]) == user_texts(api.fake.requests[2]) == ["inner task"]
    assert results_sent(api.fake.requests[2]) == [("n1", False, "deleted deep")]
    assert results_sent(api.fake.requests[3]) == [("o1", False, "inner said: inner done (stop)")]
    check_log(frames)
    decided = next(f for f in frames if f.event == "approval_decided")
    assert (decided.data["depth"], decided.data["parent_tool_call_id"]) == (1, "o1")
    assert types(frames).index("approval_decided") < types(frames).index("agent_end")
    assert "run_resumed" not in types(frames)
    turns = [(f.data.get("depth", 0), f.data["turn"]) for f in frames if f.event == "turn_start"]
    assert turns == [(0, 1), (1, 1), (1, 2), (0, 2)]


async def test_a_denied_nested_pick_gives_the_nested_model_the_reason(api: Api) -> None:
    RAN.clear()
    api.fake.script = nested_script(fake.text("inner gave up"), fake.text("outer done"))
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    resp = await decide(api, run["id"], "n1", "deny", reason="not that one")
    assert resp.status_code == 202
    frames = await Watch(api, run["id"]).done()
    await api.wait_status(run["id"], "completed")
    [(call_id, is_error, text)] = results_sent(api.fake.requests[2])
    assert call_id == "n1" and is_error and "not that one" in text
    assert "hitl_delete" not in nested_ran() and api.fake.calls == 4
    check_log(frames)


async def test_edited_arguments_of_a_nested_pick(api: Api) -> None:
    RAN.clear()
    api.fake.script = nested_script(fake.text("inner done"), fake.text("outer done"))
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    bad = await decide(api, run["id"], "n1", arguments={"path": 3})
    assert bad.status_code == 422
    assert (await decide(api, run["id"], "n1", arguments={"path": "shallow"})).status_code == 202
    await api.wait_status(run["id"], "completed")
    assert results_sent(api.fake.requests[2]) == [("n1", False, "deleted shallow")]


async def test_approval_timeout_denies_a_nested_pick(api: Api) -> None:
    RAN.clear()
    api.fake.script = nested_script(fake.text("inner timed out"), fake.text("outer done"))
    run = await api.create(input="go", toolset="hitl_testing", approval_timeout=1.0)
    await parked(api, run["id"])
    done = await api.wait_status(run["id"], "completed", within=30)
    assert done["result"] == "outer done"
    [(call_id, is_error, text)] = results_sent(api.fake.requests[2])
    assert call_id == "n1" and is_error and "approval_timeout" in text
    late = await decide(api, run["id"], "n1")
    assert late.status_code == 409 and late.json()["error"]["code"] == "not_waiting"
    check_log(await Watch(api, run["id"]).done())


async def test_cancel_while_a_nested_pick_waits(api: Api) -> None:
    RAN.clear()
    api.fake.script = nested_script(fake.text("never"))
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    assert (await api.client.post(f"/runs/{run['id']}/cancel")).status_code == 202
    done = await api.wait_status(run["id"], "cancelled")
    assert done["stop_reason"] == "aborted"
    frames = await Watch(api, run["id"]).done()
    check_log(frames)
    ends = {f.data["tool_call_id"]: f.data for f in frames if f.event == "tool_execution_end"}
    assert set(ends) == {"n1", "o1"}
    for end in ends.values():
        assert end["is_error"] and end["result"]["content"][0]["text"] == ABORTED
    assert (ends["n1"]["depth"], ends["n1"]["parent_tool_call_id"]) == (1, "o1")
    nested_end = next(f for f in frames if f.event == "agent_end" and f.data.get("depth"))
    assert nested_end.data["stop_reason"] == "aborted"
    assert nested_ran() == ["hitl_subagent"] and api.fake.calls == 2  # nothing ran again
    late = await decide(api, run["id"], "n1")
    assert late.status_code == 409 and late.json()["error"]["code"] == "not_waiting"


async def test_steer_while_a_nested_pick_waits_skips_it_and_goes_on(api: Api) -> None:
    RAN.clear()
    api.fake.script = nested_script(fake.text("steered"))
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    resp = await api.client.post(f"/runs/{run['id']}/steer", json={"content": "do X instead"})
    assert resp.status_code == 202
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "steered"
    frames = await Watch(api, run["id"]).done()
    check_log(frames)
    ends = {f.data["tool_call_id"]: f.data for f in frames if f.event == "tool_execution_end"}
    assert {k: v["result"]["content"][0]["text"] for k, v in ends.items()} == {
        "n1": SKIPPED, "o1": SKIPPED}
    assert user_texts(api.fake.requests[2])[-1] == "do X instead"
    assert results_sent(api.fake.requests[2]) == [("o1", True, SKIPPED)]
    assert nested_ran() == ["hitl_subagent"] and api.fake.calls == 3


async def test_an_earlier_answer_of_the_turn_is_not_asked_twice(api: Api) -> None:
    """The outer turn picks the subagent and a tool needing approval: both are asked for at
    once (only the second waits); once answered, the subagent's loop parks again, and the
    answer for the second pick is kept across that second parking."""
    RAN.clear()
    api.fake.script = [fake.tool_calls(("hitl_subagent", {"task": "inner task"}, "o1"),
                                       ("hitl_delete", {"path": "top"}, "o2")),
                       fake.tool_calls(("hitl_delete", {"path": "deep"}, "n1")),
                       fake.text("inner done"), fake.text("outer done")]
    run = await api.create(input="go", toolset="hitl_testing")
    first = await parked(api, run["id"])
    assert [p["tool_call_id"] for p in first["pending"]] == ["o2"]
    assert (await decide(api, run["id"], "o2", arguments={"path": "edited"})).status_code == 202
    async with asyncio.timeout(30):
        while [p["tool_call_id"] for p in (await api.get(run["id"]))["pending"]] != ["n1"]:
            await asyncio.sleep(0.02)
    assert (await decide(api, run["id"], "n1")).status_code == 202
    frames = await Watch(api, run["id"]).done()
    await api.wait_status(run["id"], "completed")
    assert types(frames).count("approval_requested") == 2
    assert results_sent(api.fake.requests[3]) == [
        ("o1", False, "inner said: inner done (stop)"), ("o2", False, "deleted edited")]
    check_log(frames)


async def test_a_nested_client_tool_is_answered_at_tool_results(api: Api) -> None:
    RAN.clear()
    api.fake.script = [fake.tool_calls(("hitl_subagent", {"task": "inner task"}, "o1")),
                       fake.tool_calls(("pick_color", {}, "n1")),
                       fake.text("inner got it"), fake.text("outer done")]
    run = await api.create(input="go", toolset="hitl_testing", client_tools=[
        {"name": "pick_color", "description": "Asks the user for a color",
         "parameters": {"type": "object", "properties": {}}}])
    watch = Watch(api, run["id"])
    asked = await watch.until("client_tool_requested")
    assert (asked.data["depth"], asked.data["parent_tool_call_id"]) == (1, "o1")
    waiting = await parked(api, run["id"])
    assert waiting["pending"][0]["kind"] == "client_tool"
    wrong = await decide(api, run["id"], "n1")
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "wrong_kind"
    resp = await api.client.post(f"/runs/{run['id']}/tool_results",
                                 json={"tool_call_id": "n1", "content": "blue"})
    assert resp.status_code == 202, resp.text
    check_log(await watch.done())
    await api.wait_status(run["id"], "completed")
    assert results_sent(api.fake.requests[2]) == [("n1", False, "blue")]
    assert api.fake.calls == 4


async def test_a_pick_two_loops_deep_parks_and_goes_on(api: Api) -> None:
    RAN.clear()
    api.fake.script = [fake.tool_calls(("hitl_subagent", {"task": "mid"}, "o1")),
                       fake.tool_calls(("hitl_subagent", {"task": "deep"}, "m1")),
                       fake.tool_calls(("hitl_delete", {"path": "x"}, "n1")),
                       fake.text("deep done"), fake.text("mid done"), fake.text("outer done")]
    run = await api.create(input="go", toolset="hitl_testing")
    watch = Watch(api, run["id"])
    waiting = await parked(api, run["id"])
    assert [(p["tool_call_id"], p["depth"], p["parent_tool_call_id"])
            for p in waiting["pending"]] == [("n1", 2, "m1")]
    assert (await decide(api, run["id"], "n1")).status_code == 202
    frames = await watch.done()
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "outer done" and api.fake.calls == 6
    assert results_sent(api.fake.requests[3]) == [("n1", False, "deleted x")]
    assert results_sent(api.fake.requests[4]) == [("m1", False, "inner said: deep done (stop)")]
    assert results_sent(api.fake.requests[5]) == [("o1", False, "inner said: mid done (stop)")]
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    starts = [f.data["tool_call_id"] for f in frames if f.event == "tool_execution_start"]
    assert starts == ["o1", "m1", "n1"]
    ends = [f.data["tool_call_id"] for f in frames if f.event == "tool_execution_end"]
    assert ends == ["n1", "m1", "o1"]
    loops = [(f.data.get("depth", 0), f.data.get("parent_tool_call_id"))
             for f in frames if f.event == "agent_start"]
    assert loops == [(0, None), (1, "o1"), (2, "m1")]
    assert [f.data.get("depth", 0) for f in frames if f.event == "agent_end"] == [2, 1, 0]


async def test_cancel_two_loops_deep_closes_every_loop_once(api: Api) -> None:
    RAN.clear()
    api.fake.script = [fake.tool_calls(("hitl_subagent", {"task": "mid"}, "o1")),
                       fake.tool_calls(("hitl_subagent", {"task": "deep"}, "m1")),
                       fake.tool_calls(("hitl_delete", {"path": "x"}, "n1"))]
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    assert (await api.client.post(f"/runs/{run['id']}/cancel")).status_code == 202
    await api.wait_status(run["id"], "cancelled")
    frames = await Watch(api, run["id"]).done()
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    ends = [(f.data["tool_call_id"], f.data.get("depth", 0), f.data["is_error"],
             f.data["result"]["content"][0]["text"])
            for f in frames if f.event == "tool_execution_end"]
    assert ends == [("n1", 2, True, ABORTED), ("m1", 1, True, ABORTED),
                    ("o1", 0, True, ABORTED)]
    assert [(f.data.get("depth", 0), f.data["stop_reason"])
            for f in frames if f.event == "agent_end"] == [
        (2, "aborted"), (1, "aborted"), (0, "aborted")]
    turn_ends = [f.data.get("depth", 0) for f in frames if f.event == "turn_end"]
    assert turn_ends == [2, 1, 0]
    assert api.fake.calls == 3 and nested_ran() == ["hitl_subagent", "hitl_subagent"]
