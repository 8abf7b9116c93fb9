"""``agentloop health``: the container health check, for the API and for a worker.

The API answers ``GET /healthz``. A worker serves no HTTP, so while its event loop runs and its
backend answers it touches a heartbeat file (``AGENTLOOP_HEALTH_FILE``) every
``heartbeat_seconds``; ``agentloop health --worker`` passes while that file is fresh::

    worker:  every heartbeat_seconds ─ backend.ping() ok? ─ touch health_file
    health --worker: age(health_file) < 3 × heartbeat_seconds + 5 ─ exit 0, else exit 1
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from app.config import Settings

if TYPE_CHECKING:  # the health check itself imports no backend
    from app.store.contract import Backend

log = logging.getLogger(__name__)
PING_TIMEOUT = 2.0


def max_age(settings: Settings) -> float:
    """How old the heartbeat file may be before the worker counts as unhealthy."""
    return 3 * settings.heartbeat_seconds + 5


async def beat(backend: Backend, path: Path, every: float) -> None:
    """Touch ``path`` every ``every`` s while the backend answers (until cancelled)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                alive = await backend.ping()
        except Exception as exc:  # not healthy this round; the file goes stale
            log.debug("health: backend ping failed: %s", exc)
            alive = False
        if alive:
            await asyncio.to_thread(path.write_text, f"{time.time():.3f}\n")
        await asyncio.sleep(every)


def check_worker(settings: Settings) -> tuple[bool, str]:
    """(healthy, why) from the heartbeat file's age."""
    path = settings.health_file
    try:
        age = time.time() - os.stat(path).st_mtime
    except OSError:
        return False, f"no heartbeat file at {path}"
    limit = max_age(settings)
    return age < limit, f"heartbeat {age:.1f} s old (limit {limit:.0f} s)"


def check_api(settings: Settings, port: int | None = None) -> tuple[bool, str]:
    """(healthy, why) from ``GET /healthz`` on this host."""
    url = f"http://127.0.0.1:{port or settings.port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=PING_TIMEOUT) as resp:
            return resp.status == 200, f"{url} answered {resp.status}"
    except OSError as exc:
        return False, f"{url}: {exc}"
