"""What keeping runs alive costs Redis: `python bench/liveness.py` prints one JSON line.

A private redis-server, ``--workers`` in-process workers (each its own connection pool, as
separate processes would have) and ``--runs`` open runs parked in a tool that never returns, so
the only traffic left is liveness: heartbeats, the claim loop's blocking reads and the scans for
lapsed workers (every worker has free slots, so it keeps claiming). Once every run is parked:
``CONFIG RESETSTAT``, wait ``--window`` seconds, read ``INFO commandstats`` (commands run inside
Lua scripts count too): Redis commands per second, in total and per command.

The same file runs against older code (``cd <checkout> && python /path/to/bench/liveness.py``):
it only uses ``Worker`` and ``make_backend``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from app.store import make_backend
from app.store.records import RunRecord
from app.worker.worker import Worker
from bench._procs import start_redis
from providers import fake
from providers.fake import FakeProvider
from tool_registry import Registry, function

PARKED: set[str] = set()
NEVER = asyncio.Event()


@function(register=False)
async def park(run: str) -> str:
    """Never returns: keeps its run open."""
    PARKED.add(run)
    await NEVER.wait()
    return "unreachable"


def resolve(model: str) -> tuple[FakeProvider, str]:
    def step(request: Any) -> fake.Step:
        return fake.tool_calls(("park", {"run": request.messages[0].content}))

    return FakeProvider(script=[step], repeat=True, record=False), "m"


async def measure(args: argparse.Namespace, url: str) -> dict[str, Any]:
    registry = Registry()
    registry.register(park)
    backends = [make_backend(url, lease=args.lease, run_ttl=3600) for _ in range(args.workers)]
    for b in backends:
        await b.start()
    stop = asyncio.Event()
    spare = 2 * -(-args.runs // args.workers)  # free slots: the workers keep claiming
    workers = [Worker(b, resolve, name=f"w{i}", concurrency=spare, lease=args.lease,
                      heartbeat=args.heartbeat, registry=registry)
               for i, b in enumerate(backends)]
    tasks = [asyncio.create_task(w.run(stop)) for w in workers]
    for n in range(args.runs):
        rid = f"run_{n}"
        await backends[0].create_run(RunRecord(id=rid, tenant="t", model="fake:m",
                                               created_at=time.time(),
                                               request={"model": "fake:m", "input": rid,
                                                        "tools": ["park"]}))
    async with asyncio.timeout(300):
        while len(PARKED) < args.runs:
            await asyncio.sleep(0.2)
    await asyncio.sleep(args.heartbeat * 2)  # settle: the claim burst is over
    client: Any = backends[0].client  # type: ignore[attr-defined]
    await client.config_resetstat()
    t0 = time.monotonic()
    await asyncio.sleep(args.window)
    stats = await client.info("commandstats")
    elapsed = time.monotonic() - t0
    stop.set()
    NEVER.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for b in backends:
        await b.close()
    per_command = {k.removeprefix("cmdstat_"): round(v["calls"] / elapsed, 1)
                   for k, v in stats.items()}
    per_command.pop("info", None)
    per_command.pop("config|resetstat", None)
    return {"open_runs": args.runs, "workers": args.workers, "lease_s": args.lease,
            "heartbeat_s": args.heartbeat, "window_s": round(elapsed, 1),
            "commands_per_s": round(sum(per_command.values()), 1),
            "by_command": dict(sorted(per_command.items(), key=lambda kv: -kv[1]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    redis = start_redis()
    try:
        result = asyncio.run(measure(args, f"redis://127.0.0.1:{redis.port}/0"))
    finally:
        redis.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
