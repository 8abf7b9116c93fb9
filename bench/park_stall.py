"""How long a client waits on a run that parked (issue 30's "stall"), on both backends::

    ai-sdk   POST /ai-sdk/chat, the tool needs approval: from the parking event
             (approval_requested: its ``ts``, read from the run's native stream alongside) to
             the end of the response (finish, [DONE], close): useChat can answer only once
             the stream has ended
    ag-ui    POST /ag-ui, the model picks a frontend tool: from client_tool_requested's ``ts``
             to the end of the response (RUN_FINISHED, close)
    native   GET /runs/{id}/events, the tool needs approval: from the approval_requested
             frame to the 202 of POST /runs/{id}/approvals sent the moment it arrived (the
             answer races the park; it must never be a 409)

Each trial is a new connection to the server, against the https fake model pacing its frames
(``--delay-ms``), C trials at once. Prints p50/p99 (ms) per cell and the answers refused::

    .venv/bin/python bench/park_stall.py [--trials 200] [--concurrency 10] [--delay-ms 20]
        [--backend memory|redis|both] [--root OTHER_CHECKOUT]

``--root`` serves another checkout (an A/B against the code before the fix: its dialect
streams end at their 5 s idle poll).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._procs import OUT, start_fake
from bench._stats import load_avg, pct
from bench._systems import start_agentloop
from bench._tls import make_tls

TOOL = {"name": "add", "description": "adds", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}


async def _parking_ts(client: httpx.AsyncClient, run_id: str, kind: str) -> float:
    """When the run's parking event (``kind``) was written: its ``ts`` (one clock)."""
    async with client.stream("GET", f"/runs/{run_id}/events") as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data:") and f'"type":"{kind}"' in line:
                ts = json.loads(line[5:])["ts"]
                return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    raise RuntimeError(f"no {kind}")


async def _dialect(client: httpx.AsyncClient, path: str, body: dict[str, Any],
                   run_id_of: Any, kind: str) -> float:
    """Stream ``path``; from the parking event's ``ts`` to the response's end (wall clock)."""
    written: asyncio.Task[float] | None = None
    async with client.stream("POST", path, json=body) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if written is None and (run_id := run_id_of(line)) is not None:
                written = asyncio.create_task(_parking_ts(client, run_id, kind))
    ended = time.time()
    assert written is not None, "no run id in the stream"
    return ended - await written


def _ai_sdk_run(line: str) -> str | None:
    if line.startswith("data:") and '"type":"start"' in line:
        return str(json.loads(line[5:])["messageId"])
    return None


def _ag_ui_run(line: str) -> str | None:
    if line.startswith("data:") and '"RUN_STARTED"' in line:
        return str(json.loads(line[5:])["runId"])
    return None


async def _ai_sdk(client: httpx.AsyncClient, n: int) -> float:
    body = {"id": f"stall-{n}-{time.time_ns()}", "approval": ["add"], "tools": ["add"],
            "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}]}
    return await _dialect(client, "/ai-sdk/chat", body, _ai_sdk_run, "approval_requested")


async def _ag_ui(client: httpx.AsyncClient, n: int) -> float:
    body = {"threadId": f"stall-{n}-{time.time_ns()}", "runId": "r", "state": {},
            "context": [], "tools": [TOOL], "forwardedProps": {"agentloop": {"tools": []}},
            "messages": [{"id": "u", "role": "user", "content": "go"}]}
    return await _dialect(client, "/ag-ui", body, _ag_ui_run, "client_tool_requested")


async def _native(client: httpx.AsyncClient, n: int) -> float:
    run = (await client.post("/runs", json={"input": "go", "tools": ["add"],
                                            "approval": ["add"]})).json()
    async with client.stream("GET", f"/runs/{run['id']}/events") as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data:") and '"approval_requested"' in line:
                call = json.loads(line[5:])["tool_call_id"]
                seen = time.monotonic()
                answer = await client.post(f"/runs/{run['id']}/approvals", json={
                    "tool_call_id": call, "decision": "deny"})
                if answer.status_code != 202:
                    raise RuntimeError(f"answer refused: {answer.status_code} {answer.text}")
                return time.monotonic() - seen
    raise RuntimeError("no approval_requested")


CELLS = {"ai-sdk": _ai_sdk, "ag-ui": _ag_ui, "native": _native}


async def _cell(url: str, cell: str, trials: int, concurrency: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)
    waits: list[float] = []
    errors: list[str] = []
    # one TLS context for every client: httpx builds (and loads CA files into) a new one per
    # client otherwise, ~10 ms of this process's CPU that would show up as the server's wait
    tls = ssl.create_default_context()

    async def one(n: int) -> None:
        async with gate, httpx.AsyncClient(base_url=url, timeout=60, verify=tls) as client:
            try:  # a new client: a new connection, as a new browser makes
                waits.append(await CELLS[cell](client, n))
            except Exception as exc:  # counted and shown, not hidden
                errors.append(f"{type(exc).__name__}: {exc}"[:200])

    lags: list[float] = []
    monitor = asyncio.create_task(_lag(lags))
    try:
        await asyncio.gather(*(one(n) for n in range(trials)))
    finally:
        monitor.cancel()
    return {"cell": cell, "n": len(waits), "p50_ms": _ms(pct(waits, 50)),
            "p99_ms": _ms(pct(waits, 99)), "max_ms": _ms(max(waits, default=None)),
            "client_lag_p99_ms": _ms(pct(lags, 99)),
            "errors": len(errors), "first_error": errors[0] if errors else None}


async def _lag(lags: list[float], every: float = 0.01) -> None:
    """How late this client's own loop wakes (its share of any wait it measures)."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(every)
        lags.append(max(0.0, loop.time() - start - every))


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--backend", choices=("memory", "redis", "both"), default="both")
    parser.add_argument("--cells", default="ai-sdk,ag-ui,native")
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    tls = make_tls(OUT / "tls")
    fake = start_fake(args.delay_ms, tls=tls)
    backends = ["memory", "redis"] if args.backend == "both" else [args.backend]
    results = []
    try:
        for backend in backends:
            server = start_agentloop(fake, redis=backend == "redis",
                                     **({"root": args.root} if args.root else {}))
            try:
                for cell in args.cells.split(","):
                    row = asyncio.run(_cell(server.url, cell, args.trials, args.concurrency))
                    row |= {"backend": backend, "load": round(load_avg(), 1)}
                    results.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                server.stop()
    finally:
        fake.stop()
    print(f"\n{'backend':8} {'cell':7} {'n':>4} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'client lag p99':>15} err")
    for r in results:
        print(f"{r['backend']:8} {r['cell']:7} {r['n']:4} {r['p50_ms']!s:>8} "
              f"{r['p99_ms']!s:>8} {r['max_ms']!s:>8} {r['client_lag_p99_ms']!s:>15} "
              f"{r['errors']}")


if __name__ == "__main__":
    main()
