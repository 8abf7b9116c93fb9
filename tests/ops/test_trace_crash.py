"""One trace per run across a worker SIGKILL and an approval wait, as exported over the wire
(issue 32): real ``agentloop worker`` processes on Redis export with the OTLP HTTP exporter
(``AGENTLOOP_OTEL``, the standard ``OTEL_*`` variables) to a receiver the test runs, which
decodes the protobuf spans.

Two runs, one sent with the caller's ``traceparent`` and one (on a thread) without, each:
``trace_lookup``, then ``trace_wait`` (worker A is SIGKILLed inside it; worker B resumes the
run: attempt 2), then the client's ``get_location`` (the run parks; the test answers; B wakes
it: attempt 3), then "done". Attempt 1's spans that were still open at the kill (its
``invoke_agent``, the ``trace_wait`` call) die with the process; the ones it had ended (its
model calls, ``trace_lookup``) were exported before the kill (the test waits for them)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.store import Backend
from tests.api.conftest import Api, serve
from tests.engine.processes import spawn_worker, stop_all
from tests.ops import trace_scripted
from tests.ops.conftest import redis_backend
from tests.support.otlp_receiver import OtlpReceiver, Span
from tests.support.stores import started_backend

pytestmark = pytest.mark.timeout(120)
TRACE_ID, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
WITHIN = 60.0
"""Seconds any one step may take on a loaded machine (each returns as soon as it is done)."""


@pytest.fixture
async def rbackend(redis_url: str) -> AsyncIterator[Backend]:
    async with started_backend(redis_url, lease=3.0) as b:
        yield b


def otel_env(receiver: OtlpReceiver) -> dict[str, str]:
    """A worker process exporting its spans to ``receiver`` within ~50 ms of their end."""
    return {"AGENTLOOP_OTEL": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "agentloop",
            "AGENTLOOP_PROVIDER_FACTORY": "tests.ops.trace_scripted:factory"}


async def wait_tool_start(backend: Backend, run_id: str, name: str) -> None:
    after = 0
    async with asyncio.timeout(WITHIN):
        while True:
            for e in await backend.wait_events(run_id, after, timeout=1):
                after = e.seq
                if e.type == "tool_execution_start" and f'"tool_name":"{name}"'.encode() \
                        in e.data:
                    return


async def start_runs(api: Api) -> tuple[str, str, str]:
    """(the run sent with a ``traceparent``, the thread run sent without, its thread)."""
    body: dict[str, Any] = {"input": "go", "tools": ["trace_lookup", "trace_wait"],
                            "client_tools": [trace_scripted.LOCATION]}
    resp = await api.client.post("/runs", json=body,
                                 headers={"traceparent": f"00-{TRACE_ID}-{PARENT}-01"})
    assert resp.status_code == 201, resp.text
    thread = (await api.client.post("/threads", json={})).json()["id"]
    resp2 = await api.client.post(f"/threads/{thread}/runs", json=body)
    assert resp2.status_code == 201, resp2.text
    return resp.json()["id"], resp2.json()["id"], thread


def named(spans: list[Span], name: str, trace_id: str | None = None) -> list[Span]:
    return [s for s in spans if s.name == name and trace_id in (None, s.trace_id)]


def attempts(spans: list[Span], run_id: str) -> dict[int, Span]:
    """The run's ``invoke_agent`` spans received, by attempt."""
    return {s.attributes["agentloop.attempt"]: s for s in named(spans, "invoke_agent")
            if s.attributes["agentloop.run_id"] == run_id}


def attempt_1_exported(spans: list[Span]) -> bool:
    """Both runs' first two model calls and their ``trace_lookup``, ended and received."""
    return len(named(spans, "chat test")) >= 4 and \
        len(named(spans, "execute_tool trace_lookup")) >= 2


async def test_one_trace_across_a_worker_sigkill_and_an_approval_wait(
        redis_url: str, rbackend: Backend, tmp_path: Path) -> None:
    gate = {"AGENTLOOP_TEST_GATE": str(tmp_path / "never")}  # A's trace_wait never returns
    procs: list[subprocess.Popen[bytes]] = []
    async with OtlpReceiver() as receiver, serve(backend=redis_backend(redis_url),
                                                 worker=False, otel=True) as api:
        try:
            procs.append(spawn_worker(redis_url, "A", tmp_path / "marks",
                                      extra_env={**otel_env(receiver), **gate}))
            with_parent, without, thread = await start_runs(api)
            for run_id in (with_parent, without):
                await wait_tool_start(rbackend, run_id, "trace_wait")
            await receiver.until(attempt_1_exported, WITHIN)
            procs.append(spawn_worker(redis_url, "B", tmp_path / "marks",
                                      extra_env=otel_env(receiver)))
            procs[0].send_signal(signal.SIGKILL)  # B starts up while A's lease runs out
            for run_id in (with_parent, without):
                await api.wait_status(run_id, "requires_action", within=WITHIN)
                answer = await api.client.post(f"/runs/{run_id}/tool_results", json={
                    "tool_call_id": "call_loc", "content": "Paris"})
                assert answer.status_code < 300, answer.text
            for run_id in (with_parent, without):
                done = await api.wait_status(run_id, "completed", "failed", within=WITHIN)
                assert done["status"] == "completed", done
            spans = await receiver.until(lambda got: all(
                sorted(attempts(got, r)) == [2, 3] for r in (with_parent, without)), WITHIN)
        finally:
            stop_all(*procs)
        caller, stored = await rbackend.get_run(with_parent), await rbackend.get_run(without)
    assert {s.resource["service.name"] for s in spans} == {"agentloop"}
    assert {s.scope for s in spans} == {"agentloop"}
    assert caller is not None and caller.traceparent == f"00-{TRACE_ID}-{PARENT}-01"
    first_span = check_run(spans, with_parent, TRACE_ID)
    assert first_span != PARENT
    for attempt in attempts(spans, with_parent).values():
        assert attempt.parent == PARENT  # every attempt under the caller's span
    trace_id = next(s.trace_id for s in spans if s.trace_id != TRACE_ID)
    first_span = check_run(spans, without, trace_id, thread)
    for attempt in attempts(spans, without).values():
        assert attempt.parent == first_span  # under the lost first attempt's span, as stored
    assert stored is not None and stored.traceparent is not None
    version, stored_trace, stored_span, flags = stored.traceparent.split("-")
    assert (version, stored_trace, stored_span) == ("00", trace_id, first_span)
    assert int(flags, 16) & 1  # sampled
    assert {s.trace_id for s in spans} == {TRACE_ID, trace_id}  # two runs, two traces


def check_run(spans: list[Span], run_id: str, trace_id: str, thread: str | None = None) -> str:
    """The run's spans in its trace, named, attributed and nested as each attempt made them;
    the first attempt's span id (the parent of the spans it ended before the kill)."""
    mine = [s for s in spans if s.trace_id == trace_id]
    ours = attempts(spans, run_id)
    assert sorted(ours) == [2, 3]  # attempt 1's invoke_agent was open at the kill: lost
    second, third = ours[2], ours[3]
    for attempt in (second, third):
        assert attempt.trace_id == trace_id
        assert attempt.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert attempt.attributes["gen_ai.provider.name"] == "fake"
        assert attempt.attributes["gen_ai.request.model"] == "test"
        assert attempt.attributes.get("gen_ai.conversation.id") == thread
        assert attempt.status == 0
    assert second.attributes["agentloop.parked"] is True  # waits for the client's answer
    assert "agentloop.parked" not in third.attributes
    assert third.attributes["gen_ai.response.finish_reasons"] == ("stop",)

    chats = named(mine, "chat test")
    lookups = named(mine, "execute_tool trace_lookup")
    waits = named(mine, "execute_tool trace_wait")
    clients = named(mine, "execute_tool get_location")
    assert len(mine) == 2 + len(chats) + len(lookups) + len(waits) + len(clients), \
        sorted(s.name for s in mine)
    (lookup,) = lookups
    first = lookup.parent
    assert first is not None and first not in (second.span_id, third.span_id)
    # attempt 1: two model calls and trace_lookup, ended before the kill; its trace_wait
    # was open (lost); attempt 2 runs trace_wait again and picks get_location; attempt 3
    # has the client's answer and the last model call
    assert sorted((s.parent, s.attributes["gen_ai.response.finish_reasons"]) for s in chats) \
        == sorted([(first, ("tool_use",)), (first, ("tool_use",)),
                   (second.span_id, ("tool_use",)), (third.span_id, ("stop",))])
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "test"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 10
        assert chat.attributes["gen_ai.usage.output_tokens"] == 5
        assert "gen_ai.output.messages" not in chat.attributes  # content only when asked
    (wait,) = waits
    (client,) = clients
    assert (wait.parent, client.parent) == (second.span_id, third.span_id)
    for tool, name, call_id in ((lookup, "trace_lookup", "call_lookup"),
                                (wait, "trace_wait", "call_wait"),
                                (client, "get_location", "call_loc")):
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert (tool.attributes["gen_ai.tool.name"],
                tool.attributes["gen_ai.tool.call.id"]) == (name, call_id)
        assert tool.status == 0
    return first
