"""Engine tests: runs driven by a real ``Worker`` over both backends with the fake provider."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.store import Backend, make_backend
from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]


@pytest.fixture(params=["memory", "redis", "cluster"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    url = {"memory": None, "redis": "redis_url", "cluster": "cluster_url"}[request.param]
    b = make_backend(url and request.getfixturevalue(url), lease=2.0, run_ttl=3600,
                     **({"cluster": True} if request.param == "cluster" else {}))
    await b.start()
    try:
        yield b
    finally:
        await b.close()
