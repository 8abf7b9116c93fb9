"""Redis killed and restarted mid-run (a dedicated server with AOF): the run completes after
the restart with no event lost; while it is down calls fail fast with BackendError."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from app.store import Backend, BackendError, RunRecord, make_backend
from app.store.records import TERMINAL
from providers import fake
from tests.engine import scripted
from tests.engine.harness import events, new_record, worker
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer(persist=True)
    s.start()
    yield s
    s.cleanup()


async def wait_end_through_outage(backend: Backend, run_id: str) -> RunRecord:
    async with asyncio.timeout(20):
        while True:
            try:
                rec = await backend.get_run(run_id)
                if rec is not None and rec.status in TERMINAL:
                    return rec
            except BackendError:
                pass
            await asyncio.sleep(0.05)


async def test_run_survives_a_redis_restart(server: RedisServer) -> None:
    backend = make_backend(server.url, lease=5.0)
    await backend.start()
    resolve = scripted.resolver([fake.tool_calls(("nap", {"seconds": 0.8})),
                                 fake.text("after the outage", chunks=4)])
    try:
        rec, _ = await backend.create_run(new_record())
        async with worker(backend, resolve, lease=5.0):
            async with asyncio.timeout(10):
                while "tool_execution_start" not in [e.type for e in
                                                     await backend.read_events(rec.id, 0)]:
                    await asyncio.sleep(0.02)
            server.stop()  # mid-tool: the tool's end and the answer are written while down
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(BackendError):
                await backend.get_run(rec.id)
            fail_fast = loop.time() - t0
            print(f"call while Redis is down failed after {fail_fast * 1000:.0f} ms")
            assert fail_fast < 1.2
            await asyncio.sleep(1.5)
            server.start()
            end = await wait_end_through_outage(backend, rec.id)
        assert (end.status, end.result) == ("completed", "after the outage")
        log = await events(backend, rec.id)
        assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
        types = [e["type"] for e in log if e["type"] != "message_update"]
        assert types[-5:] == ["turn_start", "message_start", "message_end", "turn_end",
                              "agent_end"]
        assert types.count("tool_execution_end") == 1 and types.count("agent_end") == 1
        assert "".join(e["delta"].get("text", "") for e in log
                       if e["type"] == "message_update"
                       and e["delta"]["kind"] == "text_delta") == "after the outage"
    finally:
        await backend.close()
