"""CPU per Redis script call: redis-py's pipeline (``ScriptPipeline``) against the lean connection
(``LeanScripts``), on uvloop, against a throw-away redis-server.

A live run on Redis makes one script call per model frame (its event batch), so this is the
backend's share of a frame. Each round times ``--calls`` calls of an APPEND-sized script
(XADD of one event body) for each path, the order alternating round by round; ``--per-tick``
calls are made in one loop tick (1: a lone live frame; more: many runs writing at once)::

    .venv/bin/python bench/redis_calls.py [--calls 5000] [--rounds 5] [--per-tick 1]

Prints one JSON line per round and the medians: client CPU µs per call (user + system of this
process, which is all the client does) and wall µs per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop
from redis.asyncio import BlockingConnectionPool, Redis

from app.store.redis.lean_scripts import LeanScripts
from app.store.redis.notes_reader import lean_params
from app.store.redis.pipeline import ScriptCalls, ScriptPipeline
from bench._procs import start_redis

SCRIPT = "return redis.call('XADD', KEYS[1], 'MAXLEN', '1000', '*', 't', ARGV[1], 'd', ARGV[2])"
BODY = (b'{"type":"message_update","delta":{"kind":"text_delta","content_index":0,'
        b'"text":"lorem ipsum w123@45678901"},"ts":"2026-12-03T16:00:00.000Z"}')


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _time(calls: ScriptCalls, client: Redis, n: int, per_tick: int) -> dict[str, float]:
    script = client.register_script(SCRIPT)
    await calls.call(script, ["bench:calls"], ["warm", BODY])
    cpu0, t0 = _cpu(), time.perf_counter()
    for _ in range(n // per_tick):
        await asyncio.gather(*(calls.call(script, ["bench:calls"], ["message_update", BODY])
                               for _ in range(per_tick)))
    cpu, wall = _cpu() - cpu0, time.perf_counter() - t0
    done = n // per_tick * per_tick
    return {"cpu_us": round(cpu / done * 1e6, 2), "wall_us": round(wall / done * 1e6, 2)}


async def _round(url: str, n: int, per_tick: int, order: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in order:
        pool = BlockingConnectionPool.from_url(url, socket_timeout=5.0)
        client = Redis(connection_pool=pool)
        params = lean_params(client)
        assert params is not None
        calls: ScriptCalls = (ScriptPipeline(client) if name == "redis-py"
                              else LeanScripts(client, params, timeout=5.0))
        try:
            out[name] = await _time(calls, client, n, per_tick)
        finally:
            await calls.close()
            await client.delete("bench:calls")
            await client.aclose()
    out["ratio_cpu"] = round(out["lean"]["cpu_us"] / out["redis-py"]["cpu_us"], 3)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--per-tick", type=int, default=1)
    args = p.parse_args(argv)
    redis = start_redis()
    try:
        rounds = []
        for i in range(args.rounds):
            order = ["redis-py", "lean"] if i % 2 == 0 else ["lean", "redis-py"]
            url = f"redis://127.0.0.1:{redis.port}/0"
            r = uvloop.run(_round(url, args.calls, args.per_tick, order))
            print(json.dumps(r), flush=True)
            rounds.append(r)
    finally:
        redis.stop()
    print(json.dumps({name: {k: statistics.median(r[name][k] for r in rounds)
                             for k in ("cpu_us", "wall_us")} for name in ("redis-py", "lean")}
                     | {"ratio_cpu_median": statistics.median(r["ratio_cpu"] for r in rounds),
                        "per_tick": args.per_tick}))


if __name__ == "__main__":
    main()
