"""``agentloop serve`` as a subprocess, as an operator runs it (uvloop, its own server class,
signals): tests that need the real process (logs on stderr, SIGTERM) start it with this."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx


async def start_serve(port: int, cwd: Path, *, stdout: int | None = asyncio.subprocess.DEVNULL,
                      stderr: int | None = asyncio.subprocess.DEVNULL,
                      args: tuple[str, ...] = (),
                      **settings: str) -> asyncio.subprocess.Process:
    """Start it on ``port`` with only the given ``AGENTLOOP_*`` settings from the environment
    (the others dropped, so the developer's own cannot leak in); ``args``: more of its
    options (``--no-worker``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLOOP_")}
    env.update(settings)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.process.cli", "serve", "--port", str(port), *args, cwd=cwd,
        env=env, stdout=stdout, stderr=stderr)


async def until_up(client: httpx.AsyncClient, proc: asyncio.subprocess.Process,
                   within: float = 60.0) -> None:
    """Until ``/healthz`` answers 200 (fails at once if the process exited)."""
    async with asyncio.timeout(within):
        while True:
            assert proc.returncode is None, "agentloop serve exited"
            try:
                if (await client.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
