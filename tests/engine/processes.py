"""Real worker processes (``python -m app.process.cli worker``: ``agentloop worker``) for crash
tests."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis

from app.store.redis.keys import worker_key
from tests.support.redis_cluster import is_cluster

ROOT = Path(__file__).resolve().parents[2]


def worker_env(redis_url: str, name: str, marks: Path, *, lease: float | None = 3.0,
               nap: float = 2.0) -> dict[str, str]:
    """The environment of a scripted worker process (``lease`` None: the default lease)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("AGENTLOOP_LEASE_SECONDS", "AGENTLOOP_HEARTBEAT_SECONDS")}
    if lease is not None:
        env["AGENTLOOP_LEASE_SECONDS"] = str(lease)
    return {**env, "AGENTLOOP_REDIS_URL": redis_url, "AGENTLOOP_WORKER_NAME": name,
            "AGENTLOOP_REDIS_CLUSTER": "true" if is_cluster(redis_url) else "false",
            "AGENTLOOP_TEST_MARKS": str(marks), "AGENTLOOP_TEST_NAP": str(nap),
            "AGENTLOOP_PROVIDER_FACTORY": "tests.engine.scripted:crash_factory",
            "PYTHONPATH": str(ROOT)}


WORKER = [sys.executable, "-m", "app.process.cli", "worker"]
"""The command of a worker process (``agentloop worker``)."""


def spawn_worker(redis_url: str, name: str, marks: Path, *, lease: float | None = 3.0,
                 nap: float = 2.0, log: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A worker process; its stderr (the log) goes to ``log`` when given."""
    env = {**worker_env(redis_url, name, marks, lease=lease, nap=nap), **(extra_env or {})}
    if log is None:
        return subprocess.Popen(WORKER, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=None)
    with log.open("wb") as sink:
        return subprocess.Popen(WORKER, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=sink)


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


async def wait_alive(redis_url: str, name: str, timeout_s: float = 60) -> None:
    """Until worker ``name`` has sent its first heartbeat (it is claiming from then on). On a
    cluster's seed list the key is looked for on every node (the others answer MOVED)."""
    clients = [aioredis.Redis.from_url(url) for url in redis_url.split(",")]
    try:
        async with asyncio.timeout(timeout_s):
            while not any([await _has(c, worker_key(name)) for c in clients]):
                await asyncio.sleep(0.05)
    finally:
        for client in clients:
            await client.aclose()


async def _has(client: aioredis.Redis, key: str) -> bool:
    try:
        return bool(await client.exists(key))
    except aioredis.ResponseError:  # MOVED: another node holds the slot
        return False


async def wait_line(path: Path, text: str, timeout_s: float = 60) -> None:
    """Until ``text`` appears in the file (a worker's log)."""
    async with asyncio.timeout(timeout_s):
        while not await asyncio.to_thread(_holds, path, text):
            await asyncio.sleep(0.05)


def _holds(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


def stop_all(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(5)
