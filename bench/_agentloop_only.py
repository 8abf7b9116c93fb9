"""agentloop-only figures: steer→injected latency, and memory with many runs open at once.

Steering (``POST /runs/{id}/steer``) is taken at the loop's next poll point: after the running
tool, or when a turn ends. The fake model streams slowly (``STEER_DELAY_MS`` between deltas); the
client steers at the 20th text delta of the second model call, then watches for the injected
user message's ``message_start``. Two figures per run:

- ``raw``: steer request sent → injected ``message_start`` seen. It includes the wait for the
  model's stream to finish (about 20 deltas × the delay), which no server can skip.
- ``at_poll``: from the later of (steer acknowledged, the preceding assistant ``message_end``
  seen) → injected ``message_start`` seen: what the service adds once the loop can take it.

Open runs: N runs against a model that sends one delta per second, every event stream held open
by the client; once all have started, every stream must have had an event in the last
``STALL_S`` seconds; then the server tree's memory is read and every run is cancelled.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from bench._client import Connection, HTTPError
from bench._procs import OUT, Proc, start_fake
from bench._stats import ms
from bench._systems import start_agentloop
from bench._tls import make_tls
from bench._workload import RUN_BODY, create_run, events_path

STEER_DELAY_MS = 33.0
STEER_AT_DELTA = 20
OPEN_DELAY_MS = 1000.0
STALL_S = 2.5


async def _post_steer(conn: Connection, run_id: str, text: str) -> float:
    status, data = await conn.request("POST", f"/runs/{run_id}/steer", json={"content": text})
    if status != 202:
        raise HTTPError(f"steer: {status} {data[:200]!r}")
    return time.monotonic()


async def _steer_once(port: int) -> dict[str, Any]:
    conn, side = Connection("127.0.0.1", port), Connection("127.0.0.1", port)
    text = f"steer {uuid.uuid4().hex[:12]}"
    marker = text.encode()
    run = await create_run(conn, RUN_BODY)
    deltas, sent, ack, prev_end, injected, at_end = 0, 0.0, None, 0.0, None, 0.0
    try:
        async with asyncio.TaskGroup() as tg:
            async for ev in conn.events("GET", events_path(str(run["events_url"]))):
                if ev.type == "message_update" and b'"text_delta"' in ev.data:
                    deltas += 1
                    if deltas == STEER_AT_DELTA and ack is None:
                        sent = time.monotonic()
                        ack = tg.create_task(_post_steer(side, str(run["id"]), text))
                elif ev.type == "message_end" and injected is None and b'"assistant"' in ev.data:
                    prev_end = ev.at
                elif ev.type == "message_start" and injected is None and marker in ev.data:
                    injected, at_end = ev.at, prev_end
                elif ev.type == "agent_end":
                    break
    finally:
        conn.close()
        side.close()
    if ack is None or injected is None:
        return {"ok": False, "error": "steer never sent" if ack is None else "never injected"}
    acked = ack.result()
    return {"ok": True, "raw": injected - sent, "at_poll": injected - max(acked, at_end)}


def steer(system: str, runs: int, concurrency: int = 10) -> dict[str, Any]:
    """Steer→injected latency on ``system`` (a fresh server on a slow fake model)."""
    fake = start_fake(STEER_DELAY_MS, name="fake_llm_steer", tls=make_tls(OUT / "tls"))
    server: Proc | None = None
    try:
        server = start_agentloop(fake, redis=system == "agentloop-redis", name=f"{system}-steer")
        results = asyncio.run(_bounded(server.port, runs, concurrency, limit_s=180))
    except Exception as exc:
        return {"figure": "steer", "system": system, "failed": f"{type(exc).__name__}: {exc}"}
    finally:
        if server is not None:
            server.stop()
        fake.stop()
    good = [r for r in results if r.get("ok")]
    return {"figure": "steer", "system": system, "runs": len(results), "ok": len(good),
            "errors": sorted({str(r.get("error")) for r in results if not r.get("ok")})[:3],
            "model_delay_ms": STEER_DELAY_MS,
            "steer_at_poll_ms": ms([r["at_poll"] for r in good]),
            "steer_raw_ms": ms([r["raw"] for r in good])}


async def _bounded(port: int, runs: int, concurrency: int,
                   limit_s: float) -> list[dict[str, Any]]:
    todo, out = iter(range(runs)), []

    async def worker() -> None:
        for _ in todo:
            try:
                async with asyncio.timeout(30):
                    out.append(await _steer_once(port))
            except Exception as exc:
                out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200]})

    async with asyncio.timeout(limit_s), asyncio.TaskGroup() as tg:
        for _ in range(concurrency):
            tg.create_task(worker())
    return out
