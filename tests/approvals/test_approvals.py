"""Tool approvals over HTTP on both backends: the request, the parked run, the decisions."""

from __future__ import annotations

import asyncio

from providers import fake
from tests.api.conftest import Api
from tests.approvals.helpers import (
    RAN,
    Watch,
    decide,
    parked,
    results_sent,
    types,
    until_count,
)


async def test_approve_runs_the_tool_and_the_run_completes(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_delete", {"path": "/tmp/x"}, "c1")),
                       fake.text("done")]
    run = await api.create(input="clean up", toolset="hitl_testing")
    watch = Watch(api, run["id"])
    asked = await watch.until("approval_requested")
    assert asked.data["tool_call_id"] == "c1" and asked.data["tool_name"] == "hitl_delete"
    assert asked.data["args"] == {"path": "/tmp/x"}
    waiting = await parked(api, run["id"])
    assert waiting["pending"] == [{"tool_call_id": "c1", "tool_name": "hitl_delete",
                                   "args": {"path": "/tmp/x"}, "kind": "approval",
                                   "decided": False, "depth": 0,
                                   "parent_tool_call_id": None}]
    listed = (await api.client.get("/runs", params={"status": "requires_action"})).json()
    assert [r["id"] for r in listed["runs"]] == [run["id"]]
    stored = await api.call(api.backend.get_run(run["id"]))
    assert stored.worker is None  # held by no worker
    assert "tool_execution_start" not in types(watch.frames)
    resp = await decide(api, run["id"], "c1")
    assert resp.status_code == 202, resp.text
    frames = await watch.done()
    decided = next(f for f in frames if f.event == "approval_decided")
    assert decided.data["decision"] == "approve" and decided.data["tool_call_id"] == "c1"
    end = next(f for f in frames if f.event == "tool_execution_end")
    assert end.data["is_error"] is False
    assert end.data["result"]["content"][0]["text"] == "deleted /tmp/x"
    assert [f.event for f in frames].count("agent_end") == 1
    assert "run_resumed" not in types(frames)
    done = await api.wait_status(run["id"], "completed")
    assert done["result"] == "done" and done["pending"] == []


async def test_approve_with_edited_arguments_validated_against_the_schema(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_delete", {"path": "/"}, "c1")), fake.text("ok")]
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    bad = await decide(api, run["id"], "c1", arguments={"path": 5, "recursive": "maybe"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "arguments"
    assert "recursive" in bad.json()["error"]["message"]
    wrong = await decide(api, run["id"], "c1", "deny", arguments={"path": "/tmp"})
    assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "arguments"
    assert (await api.get(run["id"]))["status"] == "requires_action"
    good = await decide(api, run["id"], "c1", arguments={"path": "/tmp/only"})
    assert good.status_code == 202
    await api.wait_status(run["id"], "completed")
    sent = results_sent(api.fake.requests[1])
    assert sent == [("c1", False, "deleted /tmp/only")]
    assert ("hitl_delete", {"path": "/", "recursive": False}) not in RAN


async def test_deny_gives_the_model_an_error_result_with_the_reason(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_delete", {"path": "/etc"}, "c1")),
                       fake.text("understood")]
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    resp = await decide(api, run["id"], "c1", "deny", reason="not that folder")
    assert resp.status_code == 202
    await api.wait_status(run["id"], "completed")
    [(call_id, is_error, text)] = results_sent(api.fake.requests[1])
    assert call_id == "c1" and is_error and "not that folder" in text
    assert ("hitl_delete", {"path": "/etc", "recursive": False}) not in RAN


async def test_several_picks_are_decided_one_by_one_and_run_in_the_models_order(
        api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_delete", {"path": "a"}, "c1"),
                                       ("hitl_echo", {"text": "between"}, "c2"),
                                       ("hitl_delete", {"path": "b"}, "c3")),
                       fake.text("all done")]
    run = await api.create(input="go", toolset="hitl_testing")
    watch = Watch(api, run["id"])
    waiting = await parked(api, run["id"])
    assert [p["tool_call_id"] for p in waiting["pending"]] == ["c1", "c3"]
    await until_count(watch, "approval_requested", 2)  # the stream may trail the status
    assert [f.data["tool_call_id"] for f in watch.frames
            if f.event == "approval_requested"] == ["c1", "c3"]
    assert (await decide(api, run["id"], "c3", "deny", reason="keep b")).status_code == 202
    again = await api.get(run["id"])
    assert again["status"] == "requires_action"
    assert [p["decided"] for p in again["pending"]] == [False, True]
    repeat = await decide(api, run["id"], "c3")
    assert repeat.status_code == 409 and repeat.json()["error"]["code"] == "already_decided"
    unknown = await decide(api, run["id"], "c2")
    assert unknown.status_code == 409 and unknown.json()["error"]["code"] == "unknown_call"
    assert (await decide(api, run["id"], "c1")).status_code == 202
    frames = await watch.done()
    starts = [f.data["tool_call_id"] for f in frames if f.event == "tool_execution_start"]
    assert starts == ["c1", "c2", "c3"]
    sent = results_sent(api.fake.requests[1])
    assert [(c, e) for c, e, _ in sent] == [("c1", False), ("c2", False), ("c3", True)]
    assert "keep b" in sent[2][2]


async def test_decisions_for_runs_that_do_not_wait_are_409(api: Api) -> None:
    api.fake.script = [fake.text("no tools")]
    run = await api.create(input="hi", tools=[])
    await api.wait_status(run["id"], "completed")
    resp = await decide(api, run["id"], "c1")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "not_waiting"
    missing = await decide(api, "run_nope", "c1")
    assert missing.status_code == 404


async def test_per_run_approval_list_and_policy(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_echo", {"text": "x"}, "c1")), fake.text("a"),
                       fake.tool_calls(("hitl_echo", {"text": "y"}, "c2")), fake.text("b")]
    first = await api.create(input="go", toolset="hitl_testing", approval=["hitl_echo"])
    assert [p["tool_name"] for p in (await parked(api, first["id"]))["pending"]] == [
        "hitl_echo"]
    await decide(api, first["id"], "c1")
    await api.wait_status(first["id"], "completed")
    second = await api.create(input="go", toolset="hitl_testing", approval="all")
    await parked(api, second["id"])
    await decide(api, second["id"], "c2")
    await api.wait_status(second["id"], "completed")
    bad = await api.create(expect=400, input="go", approval=["no_such_tool"])
    assert bad["error"]["field"] == "approval[0]"


async def test_a_tools_predicate_decides_per_call(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_pay", {"amount": 5}, "c1")),
                       fake.tool_calls(("hitl_pay", {"amount": 500}, "c2")), fake.text("paid")]
    run = await api.create(input="pay", toolset="hitl_testing")
    waiting = await parked(api, run["id"])
    assert [p["tool_call_id"] for p in waiting["pending"]] == ["c2"]
    await decide(api, run["id"], "c2")
    await api.wait_status(run["id"], "completed")


async def test_a_parked_run_holds_no_active_slot(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_delete", {"path": "p"}, "c1")), fake.text("ok")]
    run = await api.create(input="go", toolset="hitl_testing")
    await parked(api, run["id"])
    async with asyncio.timeout(20):  # the runner lets go right after the status is written
        while True:
            metrics = (await api.client.get("/metrics")).text
            if "agentloop_active_runs 0.0" in metrics.splitlines():
                break
            await asyncio.sleep(0.02)
    await decide(api, run["id"], "c1")
    await api.wait_status(run["id"], "completed")


async def _age_the_parking(api: Api, run_id: str, seconds: float) -> None:
    """Pretend the run started and parked ``seconds`` ago (as after a long wait)."""
    backend = api.backend
    if backend.name == "memory":
        async def age() -> None:
            backend._runs[run_id].started_at -= seconds
            backend._parked[run_id].parked_at -= seconds
        await api.call(age())
        return
    from app.store.redis import keys

    async def age_redis() -> None:
        record = await backend.get_run(run_id)
        state = await backend.parked_state(run_id)
        await backend.client.hset(keys.run_key(run_id), "started_at",
                                  repr(record.started_at - seconds))
        await backend.client.hset(keys.parked_key(run_id), "parked_at",
                                  repr(state.parked_at - seconds))
    await api.call(age_redis())


async def test_the_wait_does_not_count_against_the_runs_timeout(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("hitl_delete", {"path": "p"}, "c1")), fake.text("ok")]
    run = await api.create(input="go", toolset="hitl_testing", timeout=30.0)
    await parked(api, run["id"])
    await _age_the_parking(api, run["id"], 3600.0)  # an hour's wait, far past the timeout
    assert (await decide(api, run["id"], "c1")).status_code == 202
    done = await api.wait_status(run["id"], "completed", "failed")
    assert (done["status"], done["result"]) == ("completed", "ok"), done["error"]
    stored = await api.call(api.backend.get_run(run["id"]))
    assert stored.parked_seconds >= 3600.0
