"""``runtime.exec(on_approval=...)``: approvals answered in-process (sync or async), never
parked; a top-level call without a callback denies picks that need approval, and a nested
loop asks the outer call's callback (in a service run it parks the run: test_nested.py)."""

from __future__ import annotations

import asyncio

from app import runtime
from app.engine.approvals import NO_CALLBACK, Decision, WaitingCall
from app.engine.events import Event
from providers import fake
from providers.fake import FakeProvider
from providers.messages import ToolResultMessage
from tests.approvals.helpers import RAN, results_sent
from tool_registry import function


async def test_a_sync_callback_approves_and_denies() -> None:
    asked: list[WaitingCall] = []

    def on_approval(call: WaitingCall) -> bool:
        asked.append(call)
        return call.args["path"] == "ok"

    p = FakeProvider([fake.tool_calls(("hitl_delete", {"path": "ok"}, "c1"),
                                      ("hitl_delete", {"path": "no"}, "c2")), fake.text("k")])
    events: list[Event] = []
    out = await runtime.exec("go", provider=p, tools=["hitl_delete"], on_approval=on_approval,
                             on_event=events.append)
    assert out.text == "k"
    assert [(c.tool_call_id, c.kind, c.index) for c in asked] == [("c1", "approval", 0),
                                                                  ("c2", "approval", 1)]
    assert [e.type for e in events].count("approval_requested") == 2
    sent = results_sent(p.requests[1])
    assert [(c, err) for c, err, _ in sent] == [("c1", False), ("c2", True)]


async def test_an_async_callback_edits_arguments_and_a_list_adds_tools() -> None:
    async def on_approval(call: WaitingCall) -> Decision:
        return Decision(kind="approve", arguments={"text": call.args["text"].upper()})

    p = FakeProvider([fake.tool_calls(("hitl_echo", {"text": "quiet"}, "c1")), fake.text("k")])
    await runtime.exec("go", provider=p, tools=["hitl_echo"], approval=["hitl_echo"],
                       on_approval=on_approval)
    assert results_sent(p.requests[1]) == [("c1", False, "QUIET")]


async def test_without_a_callback_the_pick_is_denied() -> None:
    p = FakeProvider([fake.tool_calls(("hitl_delete", {"path": "x"}, "c1")), fake.text("k")])
    await runtime.exec("go", provider=p, tools=["hitl_delete"])
    assert results_sent(p.requests[1]) == [("c1", True, NO_CALLBACK)]
    assert ("hitl_delete", {"path": "x", "recursive": False}) not in RAN


async def test_a_nested_loop_asks_the_outer_callback() -> None:
    inner = FakeProvider([fake.tool_calls(("hitl_delete", {"path": "deep"}, "n1")),
                          fake.text("inner done")])

    @function(register=False)
    async def delegate(task: str) -> str:
        """Runs a nested loop."""
        out = await runtime.exec(task, provider=inner, tools=["hitl_delete"])
        return f"inner said: {out.text}"

    outer = FakeProvider([fake.tool_calls(("delegate", {"task": "t"}, "o1")), fake.text("k")])
    asked: list[str] = []

    def on_approval(call: WaitingCall) -> bool:
        asked.append(call.tool_call_id)
        return True

    await runtime.exec("go", provider=outer, tools=[delegate], on_approval=on_approval)
    assert asked == ["n1"]
    assert results_sent(inner.requests[1]) == [("n1", False, "deleted deep")]


async def test_a_cancel_stops_a_callback_that_never_answers() -> None:
    abort = asyncio.Event()

    async def on_approval(call: WaitingCall) -> bool:
        abort.set()  # the caller cancels while the person thinks
        await asyncio.Event().wait()
        return True

    p = FakeProvider([fake.tool_calls(("hitl_delete", {"path": "x"}, "c1")), fake.text("k")])
    async with asyncio.timeout(30):
        out = await runtime.exec("go", provider=p, tools=["hitl_delete"], abort=abort,
                                 on_approval=on_approval)
    assert out.stop_reason == "aborted" and p.calls == 1
    result = out.messages[-1]
    assert isinstance(result, ToolResultMessage) and result.is_error
