"""Real worker processes (``python -m app.worker``) for crash tests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis

from tests.support.redis_cluster import is_cluster

ROOT = Path(__file__).resolve().parents[2]


def worker_env(redis_url: str, name: str, marks: Path, *, lease: float = 1.0,
               nap: float = 2.0) -> dict[str, str]:
    """The environment of a scripted worker process."""
    return {**os.environ, "AGENTLOOP_REDIS_URL": redis_url,
            "AGENTLOOP_REDIS_CLUSTER": "true" if is_cluster(redis_url) else "false",
            "AGENTLOOP_LEASE_SECONDS": str(lease), "AGENTLOOP_WORKER_NAME": name,
            "AGENTLOOP_TEST_MARKS": str(marks), "AGENTLOOP_TEST_NAP": str(nap),
            "AGENTLOOP_PROVIDER_FACTORY": "tests.engine.scripted:crash_factory",
            "PYTHONPATH": str(ROOT)}


def spawn_worker(redis_url: str, name: str, marks: Path, *, lease: float = 1.0,
                 nap: float = 2.0, log: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A worker process; its stderr (the log) goes to ``log`` when given."""
    env = {**worker_env(redis_url, name, marks, lease=lease, nap=nap), **(extra_env or {})}
    if log is None:
        return subprocess.Popen([sys.executable, "-m", "app.worker"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=None)
    with log.open("wb") as sink:
        return subprocess.Popen([sys.executable, "-m", "app.worker"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=sink)


async def wait_consumer(redis_url: str, name: str, timeout_s: float = 10) -> None:
    """Until worker ``name`` is connected (claiming, and listening for notes) to one of the
    nodes ``redis_url`` names (a cluster's seed list names them all)."""
    clients = [aioredis.Redis.from_url(url) for url in redis_url.split(",")]
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                for client in clients:
                    if any(c.get("name") == name for c in await client.client_list()):
                        return
                await asyncio.sleep(0.05)
    finally:
        for client in clients:
            await client.aclose()


def stop_all(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(5)
