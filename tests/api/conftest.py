"""API tests: the real app under uvicorn on a loopback port, a real streaming SSE client.

``api`` serves ``create_app`` with the memory backend (or Redis, see ``backend_kind``) and a
``FakeProvider`` behind the ``fake:`` model prefix; each test scripts ``api.fake.script``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.process.main import create_app
from app.store.memory.backend import MemoryBackend
from providers.catalog import parse_model
from providers.fake import FakeProvider
from tests.support.live_server import LiveServer, client_limits
from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]

KNOWN = {"fake", "demo"}


def make_settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"default_model": "fake:test", "sse_ping_seconds": 0.2,
                            "log_format": "text", "heartbeat_seconds": 0.5,
                            "lease_seconds": 5.0}
    base.update(overrides)
    return Settings(_env_file=None, **base)  # type: ignore[call-arg]


@dataclass
class Api:
    url: str
    client: httpx.AsyncClient
    fake: FakeProvider
    backend: Any
    server: LiveServer
    headers: dict[str, str] = field(default_factory=dict)

    async def create(self, expect: int = 201, **body: Any) -> dict[str, Any]:
        body.setdefault("input", "hi")
        resp = await self.client.post("/runs", json=body)
        assert resp.status_code == expect, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def call(self, coro: Any) -> Any:
        """Run a coroutine on the server's loop (its backend lives there)."""
        return await self.server.call(coro)

    async def get(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def wait_status(self, run_id: str, *statuses: str,
                          within: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while True:
            run = await self.get(run_id)
            if run["status"] in statuses:
                return run
            assert time.monotonic() < deadline, f"run stuck in {run['status']}"
            await asyncio.sleep(0.02)


def fake_resolver(fake: FakeProvider) -> Callable[[str], tuple[FakeProvider, str]]:
    def resolve(spec: str) -> tuple[FakeProvider, str]:
        _, model = parse_model(spec, KNOWN)
        return fake, model

    return resolve


@asynccontextmanager
async def serve(*, backend: Any = None, worker: bool = True, api_key: str | None = None,
                wrap: Callable[[Any], Any] | None = None, fake: FakeProvider | None = None,
                **overrides: Any) -> AsyncIterator[Api]:
    """The app under uvicorn; ``wrap`` puts ASGI middleware of the test's own around it;
    ``fake``: a provider scripted before the worker starts (one resuming a stored run)."""
    fake = fake or FakeProvider()
    store = backend if backend is not None else MemoryBackend(lease=5.0)
    app = create_app(make_settings(**overrides), backend=store,
                     resolve_provider=fake_resolver(fake), worker=worker)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with LiveServer(wrap(app) if wrap else app) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=headers, limits=client_limits(),
                                     timeout=httpx.Timeout(10.0)) as client:
            yield Api(server.url, client, fake, store, server, headers)


@pytest.fixture(params=["memory", "redis"])
async def api(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    """The server with an embedded worker, over each backend (the core flow runs on both)."""
    backend = None
    if request.param == "redis":
        from app.store import make_backend

        backend = make_backend(request.getfixturevalue("redis_url"), lease=5.0, run_ttl=3600)
    async with serve(backend=backend) as running:
        yield running


@pytest.fixture
async def api_no_worker() -> AsyncIterator[Api]:
    async with serve(worker=False) as running:
        yield running
