"""A graceful shutdown does not wait for open event streams (``app.delivery.draining``).

``agentloop serve`` in a subprocess (uvloop, its own ``DrainingServer``): a thread's event
stream never ends on its own, so before this every SIGTERM waited uvicorn's whole graceful
timeout (30 s) for it and then cut it. Now the stream ends cleanly at its next ping, the
process exits well before that timeout, and a client resumes elsewhere with Last-Event-ID."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx

from tests.support.live_server import free_port
from tests.support.serve_process import start_serve, until_up

GRACEFUL = 30.0
"""``timeout_graceful_shutdown`` of ``agentloop serve``."""


async def test_sigterm_ends_open_event_streams_and_exits_before_the_graceful_timeout(
        tmp_path: Path) -> None:
    port = free_port()
    proc = await start_serve(port, tmp_path, AGENTLOOP_DEFAULT_MODEL="demo:echo",
                             AGENTLOOP_SSE_PING_SECONDS="0.5",
                             AGENTLOOP_WORKSPACE_ROOT=str(tmp_path / "ws"))
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                     timeout=httpx.Timeout(60.0)) as client:
            await until_up(client, proc)
            thread = (await client.post("/threads", json={})).json()
            run = (await client.post(f"/threads/{thread['id']}/runs",
                                     json={"input": "hello"})).json()
            async with client.stream("GET", f"/threads/{thread['id']}/events") as stream, \
                    client.stream("GET", f"/runs/{run['id']}/events") as ended_run:
                assert stream.status_code == 200
                chunks = stream.aiter_bytes()
                seen = await anext(chunks)  # the stream is open (retry field, events)
                await ended_run.aread()  # a run's stream ends with its run, as before
                sent = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                async for chunk in chunks:  # ends with a clean end of body (no error)
                    seen += chunk
                ended = time.monotonic() - sent
            assert b"agent_end" in seen
            async with asyncio.timeout(GRACEFUL * 2):
                code = await proc.wait()
            exited = time.monotonic() - sent
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    # without draining the stream was held to the graceful timeout (30 s), then cut
    print(f"stream ended {ended:.2f} s, process exited {exited:.2f} s after SIGTERM")
    assert ended < GRACEFUL / 2 and exited < GRACEFUL / 2, (ended, exited)
