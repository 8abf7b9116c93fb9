"""Memory with many agentloop runs open at once, each streamed to its own SSE client.

Timeline (all bounded)::

    create N runs (50 at a time, ≤120 s), one reader per run on its own connection
    ── every stream has had an event (≤60 s) ── hold HOLD_S ── check: every stream had an
    event in the last STALL_S s and none ended; read RSS ── cancel all ── readers end (≤30 s)

The fake model sends one delta per second, so a run that is alive shows an event every second.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from bench._client import Connection
from bench._procs import OUT, Proc, fake_stats, start_fake
from bench._systems import start_agentloop
from bench._tls import make_tls
from bench._workload import RUN_BODY, create_run, events_path

DELAY_MS = 1000.0
STALL_S = 2.5
HOLD_S = 3.0
CREATORS = 50


@dataclass
class _Stream:
    run_id: str
    events: int = 0
    last_at: float = 0.0
    ended: bool = False
    error: str | None = None


async def _read(port: int, stream: _Stream, path: str) -> None:
    conn = Connection("127.0.0.1", port)
    try:
        async for ev in conn.events("GET", path):
            stream.events += 1
            stream.last_at = ev.at
    except Exception as exc:
        stream.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        stream.ended = True
        conn.close()


async def _hold(server: Proc, fake: Proc, n: int) -> dict[str, Any]:
    port, streams, readers = server.port, [], []
    idle = server.mem_mb()
    todo = iter(range(n))

    async def creator() -> None:
        conn = Connection("127.0.0.1", port)
        try:
            for _ in todo:
                run = await create_run(conn, RUN_BODY)
                stream = _Stream(str(run["id"]))
                streams.append(stream)
                path = events_path(str(run["events_url"]))
                readers.append(asyncio.create_task(_read(port, stream, path)))
        finally:
            conn.close()

    t0 = time.monotonic()
    try:
        async with asyncio.timeout(120), asyncio.TaskGroup() as tg:
            for _ in range(CREATORS):
                tg.create_task(creator())
        create_s = time.monotonic() - t0
        async with asyncio.timeout(60):
            while not all(s.events or s.ended for s in streams):
                await asyncio.sleep(0.2)
        await asyncio.sleep(HOLD_S)
        now = time.monotonic()
        live = sum(1 for s in streams if not s.ended and now - s.last_at < STALL_S)
        mem = server.mem_mb()
        upstream = fake_stats(fake)["open_streams"]
        return {"created": len(streams), "create_s": round(create_s, 2),
                "streaming": live, "all_streaming": live == n and len(streams) == n,
                "ended_early": sum(1 for s in streams if s.ended),
                "reader_errors": sorted({s.error for s in streams if s.error})[:3],
                "fake_open_streams": upstream,
                "rss_mb": round(mem["rss"], 1), "hwm_mb": round(mem["hwm"], 1),
                "idle_rss_mb": round(idle["rss"], 1),
                "kib_per_run": round((mem["rss"] - idle["rss"]) * 1024 / max(1, n), 1)}
    finally:
        await _cancel_all(port, [s.run_id for s in streams])
        _, pending = await asyncio.wait(readers, timeout=30) if readers else (set(), set())
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)


async def _cancel_all(port: int, run_ids: list[str]) -> None:
    todo = iter(run_ids)

    async def canceller() -> None:
        conn = Connection("127.0.0.1", port)
        try:
            for run_id in todo:
                try:
                    await conn.request("POST", f"/runs/{run_id}/cancel")
                except Exception:
                    conn.close()
        finally:
            conn.close()

    try:
        async with asyncio.timeout(60), asyncio.TaskGroup() as tg:
            for _ in range(CREATORS):
                tg.create_task(canceller())
    except TimeoutError:
        pass


def open_runs(system: str, n: int) -> dict[str, Any]:
    """Hold ``n`` runs open on a fresh ``system`` server; memory and liveness figures."""
    fake = start_fake(DELAY_MS, name="fake_llm_open", tls=make_tls(OUT / "tls"))
    server: Proc | None = None
    head = {"figure": "open_runs", "system": system, "runs": n}
    try:
        server = start_agentloop(fake, redis=system == "agentloop-redis", name=f"{system}-open",
                                 extra_env={"AGENTLOOP_WORKER_CONCURRENCY": str(n + 100)})
        return head | asyncio.run(_hold(server, fake, n))
    except Exception as exc:
        return head | {"failed": f"{type(exc).__name__}: {exc}"[:2000]}
    finally:
        if server is not None:
            server.stop()
        fake.stop()
