"""End-to-end fixtures: the real service over a real socket, with the real provider catalog.

Unlike ``tests/api`` (a ``FakeProvider`` behind every model), ``serve_catalog`` lets the service
build its providers from the process environment, so each test points a provider's base URL at
a loopback ``WireServer`` (``monkeypatch.setenv`` before the server starts: the lifespan
snapshots the environment). ``backend`` runs each test over memory and over Redis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from app.process.main import create_app
from app.store.memory.backend import MemoryBackend
from providers.fake import FakeProvider
from tests.api.conftest import Api, make_settings
from tests.support.live_server import LiveServer, client_limits
from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@asynccontextmanager
async def serve_catalog(*, backend: Any = None, **overrides: Any) -> AsyncIterator[Api]:
    """The service with its embedded worker and the built-in catalog (no provider injected);
    ``Api.fake`` is an unused placeholder."""
    store = backend if backend is not None else MemoryBackend(lease=5.0)
    app = create_app(make_settings(**overrides), backend=store)
    with LiveServer(app) as server:
        async with httpx.AsyncClient(base_url=server.url, limits=client_limits(),
                                     timeout=httpx.Timeout(10.0)) as client:
            yield Api(server.url, client, FakeProvider(), store, server)


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> Any:
    """None (the memory backend ``serve_catalog`` makes) or a Redis backend on a flushed db."""
    if request.param == "memory":
        return None
    from app.store import make_backend

    return make_backend(request.getfixturevalue("redis_url"), lease=5.0, run_ttl=3600)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy in the environment would route the loopback wire servers through it."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
