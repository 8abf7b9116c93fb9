"""The contract suite runs every test against every backend (``backend`` fixture): memory,
one Redis, and a Redis Cluster of 3 masters and 3 replicas."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from app.store import Backend, make_backend
from app.store.redis.backend import RedisBackend
from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]

LEASE = 1.0


@pytest.fixture(params=["memory", "redis", "cluster"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    url = {"memory": None, "redis": "redis_url", "cluster": "cluster_url"}[request.param]
    b = make_backend(url and request.getfixturevalue(url), lease=LEASE, run_ttl=3600,
                     **({"cluster": True} if request.param == "cluster" else {}))
    await b.start()
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def redis_backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    """One single-node Redis backend, for tests of Redis-only parts (notes, their reader)."""
    b = make_backend(redis_url, lease=LEASE, run_ttl=3600)
    assert isinstance(b, RedisBackend)
    await b.start()
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    """A plain redis-py client of the session's (flushed) Redis."""
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()
