"""The workload: one run as a frontend drives it, per system, and M of them at concurrency C.

agentloop: ``POST /runs`` then ``GET events_url`` over SSE until the server closes after
``agent_end``. LangGraph: a stateless ``POST /runs/stream`` with ``stream_mode=["messages"]``,
read until the body ends. Both: times from just before the create request to the first event,
the first model delta and the end; events counted; the answer checked (the tool result made it
into the model's text).

Timeline of one worker::

    t0 ── connect ── POST /runs ── 201 ── GET /events ── agent_start … agent_end ── close ── next

``fresh=True`` (the production path): every run opens its own connection, as distinct browsers
do, and its POST and GET share it, as one browser's connection pool would (LangGraph's single
``POST /runs/stream`` has it to itself). ``fresh=False`` (the micro-benchmark): each worker keeps
one keep-alive connection for all its runs. Lag: each paced text delta carries the time the
fake model wrote it; ``lags`` are arrival − write for every delta received (agentloop: one per
``message_update``; LangGraph: the newest delta of each ``messages/partial``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson

from bench._client import Connection, HTTPError, stamps

T = TypeVar("T")

RUN_BODY = {"model": "openai:fake-model", "input": "add 2 and 3", "tools": ["add"]}
PEER_BODY = {"assistant_id": "agent",
             "input": {"messages": [{"role": "user", "content": "add 2 and 3"}]},
             "stream_mode": ["messages"]}
ANSWER = b"The sum of 2 and 3 is 5."


@dataclass(slots=True)
class RunRecord:
    """Times in seconds from the create request (``time.monotonic``, the fake's clock too)."""

    first_event: float | None = None
    first_delta: float | None = None
    end: float | None = None
    events: int = 0
    ok: bool = False
    error: str | None = None
    lags: list[float] = field(default_factory=list)


@dataclass
class Workload:
    records: list[RunRecord] = field(default_factory=list)
    wall_s: float = 0.0


def events_path(events_url: str) -> str:
    parts = urlsplit(events_url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


async def create_run(conn: Connection, body: dict[str, object]) -> dict[str, object]:
    status, data = await conn.request("POST", "/runs", json=body)
    if status != 201:
        raise HTTPError(f"POST /runs: {status} {data[:300]!r}")
    run: dict[str, object] = orjson.loads(data)
    return run


async def agentloop_run(conn: Connection, body: dict[str, object] = RUN_BODY) -> RunRecord:
    rec = RunRecord()
    t0 = time.monotonic()
    run = await create_run(conn, body)
    tool_ok = False
    async for ev in conn.events("GET", events_path(str(run["events_url"]))):
        rec.events += 1
        if rec.first_event is None:
            rec.first_event = ev.at - t0
        if ev.type == "message_update":
            if rec.first_delta is None:
                rec.first_delta = ev.at - t0
            rec.lags += [ev.at - s for s in stamps(ev.data)]
        elif ev.type == "tool_execution_end":
            tool_ok = ev.json()["is_error"] is False
        elif ev.type == "agent_end":
            rec.end = ev.at - t0
            end = ev.json()
            rec.ok = tool_ok and end["stop_reason"] == "stop"
            if not rec.ok:
                rec.error = f"agent_end {end.get('stop_reason')}: {end.get('error')}"
    if rec.end is None:
        rec.error = "stream ended without agent_end"
    return rec


async def langgraph_run(conn: Connection) -> RunRecord:
    rec = RunRecord()
    t0 = time.monotonic()
    last = b""
    async for ev in conn.events("POST", "/runs/stream", json=PEER_BODY):
        rec.events += 1
        if rec.first_event is None:
            rec.first_event = ev.at - t0
        if ev.type == "messages/partial":
            if rec.first_delta is None:
                rec.first_delta = ev.at - t0
            last = ev.data
            if sent := stamps(ev.data):
                rec.lags.append(ev.at - sent[-1])
        elif ev.type == "error":
            rec.error = ev.data[:300].decode(errors="replace")
    rec.end = time.monotonic() - t0
    rec.ok = rec.error is None and ANSWER in last
    if not rec.ok and rec.error is None:
        rec.error = f"no answer in the last message: {last[:200]!r}"
    return rec


RunFn = Callable[[Connection], Awaitable[RunRecord]]


async def drive(run_fn: RunFn, port: int, runs: int, concurrency: int, *, fresh: bool = True,
                run_timeout: float = 60.0, total_timeout: float = 600.0) -> Workload:
    """``runs`` runs, ``concurrency`` at a time, each on a new connection when ``fresh``; each
    bounded by ``run_timeout``, all by ``total_timeout`` (runs not started by then are recorded
    as errors)."""
    out = Workload()
    todo = iter(range(runs))
    deadline = time.monotonic() + total_timeout

    async def worker() -> None:
        conn = Connection("127.0.0.1", port)
        try:
            for _ in todo:
                if time.monotonic() > deadline:
                    out.records.append(RunRecord(error="total timeout"))
                    continue
                try:
                    async with asyncio.timeout(run_timeout):
                        rec = await run_fn(conn)
                except Exception as exc:  # recorded, the worker goes on with a new connection
                    conn.close()
                    rec = RunRecord(error=f"{type(exc).__name__}: {exc}"[:300])
                out.records.append(rec)
                if fresh:
                    conn.close()
        finally:
            conn.close()

    t0 = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        for _ in range(min(concurrency, runs)):
            tg.create_task(worker())
    out.wall_s = time.monotonic() - t0
    return out


RUN_FNS: dict[str, RunFn] = {"agentloop": agentloop_run, "agentloop-redis": agentloop_run,
                             "langgraph": langgraph_run, "relay-floor": agentloop_run}


def _drive_part(system: str, port: int, runs: int, concurrency: int, *, fresh: bool
                ) -> Workload:
    return asyncio.run(drive(RUN_FNS[system], port, runs, concurrency, fresh=fresh))


def drive_split(system: str, port: int, runs: int, concurrency: int, *, procs: int = 2,
                fresh: bool = True) -> Workload:
    """``drive`` from ``procs`` client processes at once, the runs and the concurrency split
    between them, their records merged: one client process's event loop at C=50, busy with
    its own TLS-free but many-socket work, delays what it reads and so the first event it
    times; two processes stand for browsers that do not share a loop. ``procs=1`` is
    ``drive`` in this process. The children's CPU shows in ``RUSAGE_CHILDREN`` once the pool
    has shut down (``bench._stats.client_cpu_s``)."""
    if procs <= 1:
        return asyncio.run(drive(RUN_FNS[system], port, runs, concurrency, fresh=fresh))
    parts = split_across(_drive_part, procs, runs, concurrency, system, port, fresh=fresh)
    out = Workload(wall_s=max([p.wall_s for p in parts] + [0.0]))
    for part in parts:
        out.records += part.records
    return out


def split_across(part: Callable[..., T], procs: int, runs: int, concurrency: int,
                 *args: Any, **kwargs: Any) -> list[T]:
    """``part(*args, runs_i, concurrency_i, **kwargs)`` in ``procs`` client processes at
    once, forked (no event loop runs in the caller between cells), the runs and the
    concurrency shared out between them (each at least 1): what each returned, in order."""
    runs_of = [runs // procs + (i < runs % procs) for i in range(procs)]
    conc_of = [max(1, concurrency // procs + (i < concurrency % procs)) for i in range(procs)]
    with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(part, *args, n, c, **kwargs) for n, c in zip(runs_of, conc_of,
                                                                         strict=True)]
        return [f.result() for f in futures]
