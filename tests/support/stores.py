"""A store for a server that a whole package or module shares, on the backend a fixture's
parameter names: ``"memory"``, or ``"redis"`` on the session's Redis, flushed first."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from app.store import make_backend
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
