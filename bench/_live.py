"""Live streams per core: how many runs, each streaming ~30 frames/s to its own SSE client, one
agentloop process carries with event lag p99 ≤ ``LAG_P99_MS``.

Each step holds N runs at once against the paced https fake model (one text delta per
``FRAME_MS``, stamped with its write time; no tools): the runs are created over ``RAMP_S``
(so their frames interleave as independent users' would), each on its own connection (POST, then
the SSE GET on it), then after ``SETTLE_S`` a window of ``WINDOW_S`` is measured::

    create N runs (spread over RAMP_S) ── settle ── [window: CPU, frames, lags] ── cancel all

Per step: frames delivered per second, lag (model frame written → SSE frame received) p50/p99/max
over the window's frames, the server's CPU over the window (the agentloop process; redis-server
apart), so CPU µs per delivered frame and the streams one core carries at that cost
(``1e6 / (µs per frame × frames per stream-second)``). Steps grow until the lag target is
missed, the server is saturated or the last step is done. The client reads each stream with one
regex per read (no per-event objects), so it stays cheap at thousands of frames per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench._client import Connection, stamps
from bench._procs import Proc, machine_busy_s
from bench._stats import load_avg, ms
from bench._workload import create_run, events_path

FRAME_MS = 33.0
LAG_P99_MS = 100.0
RAMP_S = 3.0
SETTLE_S = 2.0
WINDOW_S = 6.0
_END = re.compile(rb"event: agent_end")


@dataclass
class _Stream:
    run_id: str = ""
    frames: int = 0
    lags: list[float] = field(default_factory=list)
    ended: bool = False
    error: str | None = None


@dataclass
class _Window:
    start: float = float("inf")
    end: float = float("inf")

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end


def live_body(seconds: float) -> dict[str, Any]:
    """A run that streams text for about ``seconds`` (no tools: one model call)."""
    deltas = int(seconds * 1000 / FRAME_MS) + 10
    return {"model": "openai:fake-model", "input": f"stream deltas={deltas}", "tools": []}


async def _follow(port: int, stream: _Stream, window: _Window, body: dict[str, Any]) -> None:
    conn = Connection("127.0.0.1", port)
    try:
        run = await create_run(conn, body)
        stream.run_id = str(run["id"])
        tail = b""
        async for data, at in conn.raw_events(events_path(str(run["events_url"]))):
            buf = tail + data
            cut = buf.rfind(b"\n\n") + 2
            if cut < 2:
                tail = buf
                continue
            whole, tail = buf[:cut], buf[cut:]
            if window.holds(at):
                stream.frames += whole.count(b"event: ")
                stream.lags += [at - s for s in stamps(whole)]
            if _END.search(whole):
                break
    except Exception as exc:
        stream.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        stream.ended = True
        conn.close()


async def _cancel(port: int, run_ids: list[str]) -> None:
    conn = Connection("127.0.0.1", port)
    try:
        for run_id in run_ids:
            with contextlib.suppress(Exception):
                await conn.request("POST", f"/runs/{run_id}/cancel")
    finally:
        conn.close()


async def step(server: Proc, n: int, fake: Proc | None = None) -> dict[str, Any]:
    """Hold ``n`` live streams on ``server`` and measure one window (see the module doc).
    With ``fake``: also the fake model's, this (client) process's and the whole machine's
    CPU over the window."""
    window = _Window()
    body = live_body(RAMP_S + SETTLE_S + WINDOW_S + 5)
    streams = [_Stream() for _ in range(n)]
    tasks = []
    for i, s in enumerate(streams):
        tasks.append(asyncio.create_task(_follow(server.port, s, window, body)))
        await asyncio.sleep(RAMP_S / n if i < n - 1 else 0)
    await asyncio.sleep(SETTLE_S)
    others0 = _others_cpu_s(fake)
    cpu0, redis0, t0 = server.cpu_s(), sum(p.cpu_s() for p in server.extra), time.monotonic()
    window.start, window.end = t0, t0 + WINDOW_S
    await asyncio.sleep(WINDOW_S)
    cpu1, redis1, t1 = server.cpu_s(), sum(p.cpu_s() for p in server.extra), time.monotonic()
    others1 = _others_cpu_s(fake)
    load = load_avg()
    await asyncio.sleep(0.3)  # frames in flight at the window's end still count
    ids = [s.run_id for s in streams if s.run_id]
    await asyncio.gather(*(_cancel(server.port, ids[i::20]) for i in range(20)))
    _, pending = await asyncio.wait(tasks, timeout=30)
    for task in pending:
        task.cancel()
    frames = sum(s.frames for s in streams)
    lags = [lag for s in streams for lag in s.lags]
    wall = t1 - t0
    redis_s = redis1 - redis0
    server_s = cpu1 - cpu0 - redis_s
    us_per_frame = server_s / frames * 1e6 if frames else None
    return {
        "streams": n, "frames_per_s": round(frames / wall, 1),
        "frames_per_stream_s": round(frames / wall / n, 2),
        "live": sum(1 for s in streams if s.frames), "errors": sorted(
            {s.error for s in streams if s.error})[:3],
        "lag_ms": ms(lags), "server_cpu_util": round(server_s / wall, 3),
        "redis_cpu_util": round(redis_s / wall, 3) if server.extra else None,
        "server_us_per_frame": round(us_per_frame, 1) if us_per_frame else None,
        "with_redis_us_per_frame": round((server_s + redis_s) / frames * 1e6, 1)
        if frames and server.extra else None,
        "streams_per_core": round(1e6 / (us_per_frame * frames / wall / n))
        if us_per_frame and frames else None,
        "load_avg": load,
    } | ({"client_cpu_util": round((others1[0] - others0[0]) / wall, 3),
          "fake_cpu_util": round((others1[1] - others0[1]) / wall, 3),
          "machine_busy": round((others1[2] - others0[2]) / wall, 3)} if fake else {})


def _others_cpu_s(fake: Proc | None) -> tuple[float, float, float]:
    """(this client process's CPU, the fake model's, the whole machine's busy time): where
    the rest of the machine goes."""
    if fake is None:
        return 0.0, 0.0, 0.0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, fake.cpu_s(), machine_busy_s()


def sustained(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The largest step that met the lag target with every stream live."""
    good = [s for s in steps if _meets(s)]
    return max(good, key=lambda s: s["streams"]) if good else None


def _meets(s: dict[str, Any]) -> bool:
    p99 = s["lag_ms"]["p99"]
    return p99 is not None and p99 <= LAG_P99_MS and s["live"] == s["streams"] and not s["errors"]


MIN_STEPS = 3


def run_steps(server: Proc, sizes: list[int], *, say: Any = print, fake: Proc | None = None,
              processes: int = 1) -> list[dict[str, Any]]:
    """Steps of growing size until one saturates the server (``processes`` cores), or misses
    the lag target after ``MIN_STEPS`` (on a busy machine the lag misses early; the CPU per
    frame still falls as more frames share each loop turn, so the larger steps are measured
    anyway). ``fake``: see ``step``."""
    out: list[dict[str, Any]] = []
    for n in sizes:
        result = asyncio.run(step(server, n, fake))
        say(f"  {n} streams: lag p99 {result['lag_ms']['p99']} ms, "
            f"{result['server_us_per_frame']} µs/frame, util {result['server_cpu_util']}, "
            f"load {result['load_avg']}")
        out.append(result)
        saturated = result["server_cpu_util"] > 0.95 * processes
        if saturated or (not _meets(result) and len(out) >= MIN_STEPS):
            break
    return out


def interleaved(servers: dict[str, Callable[[], Proc]], rounds: int, streams: int,
                keep: tuple[str, ...], say: Any = None) -> list[dict[str, Any]]:
    """One step of ``streams`` on a fresh server of each kind per round, the order
    alternating round by round (A B, B A, …): per round ``{kind: the step's figures named in
    keep}``. ``say(round, kind, figures)`` reports each step as it ends."""
    names = list(servers)
    rows: list[dict[str, Any]] = []
    for rnd in range(rounds):
        row: dict[str, Any] = {"round": rnd + 1}
        for name in names if rnd % 2 == 0 else names[::-1]:
            server = servers[name]()
            try:
                figures = asyncio.run(step(server, streams))
            finally:
                server.stop()
            row[name] = {k: figures[k] for k in keep}
            if say is not None:
                say(rnd + 1, name, figures)
        rows.append(row)
    return rows
