"""Stores for tests: one a whole package or module shares, on the backend a fixture's
parameter names (``"memory"``, or ``"redis"`` on the session's Redis, flushed first); and a
started Redis backend for a test that kills workers (``started_backend``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis

from app.store import make_backend
from app.store.contract import Backend
from app.store.memory.backend import MemoryBackend


def shared_store(request: pytest.FixtureRequest, kind: str) -> Any:
    """A fresh backend of ``kind`` (lease 5 s, runs kept an hour)."""
    if kind != "redis":
        return MemoryBackend(lease=5.0)
    url = request.getfixturevalue("redis_server_url")
    flush = redis.Redis.from_url(url)
    flush.flushdb()
    flush.close()
    return make_backend(url, lease=5.0, run_ttl=3600)


@asynccontextmanager
async def started_backend(url: str, **options: Any) -> AsyncIterator[Backend]:
    """``make_backend(url, **options)``, started, closed after."""
    backend = make_backend(url, **options)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()
