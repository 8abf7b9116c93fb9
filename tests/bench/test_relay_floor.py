"""Smoke test of bench/relay_floor.py, the floor under the live-streams figure: against the
paced https fake model it relays every text delta as its own SSE frame, stamps intact, and
ends with ``agent_end``; a second run on the same client connection reuses the model
connection (a kept-alive pool, as agentloop has)."""

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


async def _one_run(conn: Connection) -> bytes:
    run: dict[str, Any] = await create_run(conn, {"input": f"stream deltas={DELTAS}"})
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
        assert body.rstrip(b"\r\n").endswith(b"event: agent_end\ndata: {}\n\n\r\n0")
    after = fake_stats(fake)
    assert after["requests"] - before["requests"] == 2
    # one connection for both model calls (the other new one is the /stats request itself)
    assert after["connections"] - before["connections"] == 2
