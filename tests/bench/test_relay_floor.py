"""Smoke test of bench/relay_floor.py, the floor under the live-streams figure: against the
paced https fake model it relays every text delta as its own SSE frame, stamps intact, and
ends with ``agent_end``; a second run on the same client connection reuses the model
connection (a kept-alive pool, as agentloop has). On the production path's run (the model picks
``add`` first) it asks the model a second time itself, on the same connection, and relays both
replies: what ``make bench``'s ``relay-floor`` system costs is that whole run."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import relay_floor
from bench._client import Connection, stamps
from bench._procs import Proc, fake_stats, start_fake
from bench._tls import make_tls
from bench._workload import create_run, events_path

pytestmark = pytest.mark.timeout(60)
DELTAS = 12


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, Proc]]:
    tls = make_tls(Path(tmp_path_factory.mktemp("tls")))
    fake = start_fake(5.0, tls=tls, name="fake_llm_relay_test")
    try:
        server = relay_floor.start_relay(fake)
        try:
            yield fake, server
        finally:
            server.stop()
    finally:
        fake.stop()


async def _one_run(conn: Connection, prompt: str = f"stream deltas={DELTAS}") -> bytes:
    run: dict[str, Any] = await create_run(conn, {"input": prompt})
    body = b""
    async for data, _ in conn.raw_events(events_path(str(run["events_url"]))):
        body += data
        if b"event: agent_end" in body:
            break
    return body


def test_every_delta_is_its_own_frame_and_the_model_connection_is_kept(
        relay: tuple[Proc, Proc]) -> None:
    fake, server = relay
    before = fake_stats(fake)

    async def two_runs() -> list[bytes]:
        conn = Connection("127.0.0.1", server.port)
        try:
            return [await _one_run(conn), await _one_run(conn)]
        finally:
            conn.close()

    for body in asyncio.run(two_runs()):
        updates = re.findall(rb"event: message_update\ndata: ([^\n]*)\n\n", body)
        assert any(b'"content": " w' in u or b'"content":" w' in u for u in updates)
        assert len(updates) >= DELTAS  # one frame per model frame, none merged
        assert stamps(body)  # the write times survive for the lag figure
        assert body.rstrip(b"\r\n").endswith(
            b'event: agent_end\ndata: {"stop_reason":"stop"}\n\n\r\n0')
        assert b"tool_execution_end" not in body  # no tool was picked
    after = fake_stats(fake)
    assert after["requests"] - before["requests"] == 2
    # one connection for both model calls (the other new one is the /stats request itself)
    assert after["connections"] - before["connections"] == 2


def test_a_run_that_picks_a_tool_is_relayed_through_both_model_calls(
        relay: tuple[Proc, Proc]) -> None:
    fake, server = relay
    before = fake_stats(fake)

    async def tool_run() -> bytes:
        conn = Connection("127.0.0.1", server.port)
        try:
            return await _one_run(conn, "add 2 and 3")
        finally:
            conn.close()

    body = asyncio.run(tool_run())
    events = re.findall(rb"event: (\w+)\ndata: ([^\n]*)\n\n", body)
    names = [name for name, _ in events]
    picked = names.index(b"tool_execution_end")
    assert all(name == b"message_update" for name in names[:picked])
    assert any(b'"tool_calls"' in data for _, data in events[:picked])  # the pick, relayed
    assert names[-1] == b"agent_end" and events[-1][1] == b'{"stop_reason":"stop"}'
    answer = names[picked + 1:-1]
    assert len(answer) >= 40 and set(answer) == {b"message_update"}  # the second reply
    assert stamps(body)
    after = fake_stats(fake)
    assert after["tool_call_answers"] - before["tool_call_answers"] == 1
    assert after["text_answers"] - before["text_answers"] == 1
    # both calls on one model connection (the other new one is the /stats request itself)
    assert after["connections"] - before["connections"] <= 2
