"""Servers for the operations tests (issue 32): the app under uvicorn with quotas set, on
each backend."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.api.conftest import Api, serve
from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]

LIMITS = {"t": {"max_active_runs": 2}, "k": {"runs_per_minute": 3},
          "*": {"max_active_runs": 1000}}
KEYS = "key-t:t,key-k:k,key-free:free"


def limits(table: dict[str, Any] | None = None) -> str:
    return orjson.dumps(table or LIMITS).decode()


def redis_backend(url: str) -> Any:
    from app.store import make_backend

    return make_backend(url, lease=5.0, run_ttl=3600)


@pytest.fixture(params=["memory", "redis"])
async def ops(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    """The server with quotas (``LIMITS``) and an embedded worker, over each backend; its
    client sends tenant ``t``'s key."""
    backend = None
    if request.param == "redis":
        backend = redis_backend(request.getfixturevalue("redis_url"))
    async with serve(backend=backend, api_key="key-t", api_keys=KEYS,
                     tenant_limits=limits()) as running:
        yield running
