"""``AGENTLOOP_SUBJECT_RATE``: one end user's requests per window, counted in the store, so two
API processes on one Redis share the count; another user and the tenant's key go on."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import httpx
import redis

from app.process.main import create_app
from app.store import make_backend
from app.store.memory.backend import MemoryBackend
from tests.api.conftest import make_settings
from tests.control.conftest import CommandProvider
from tests.support.live_server import LiveServer

LIMIT = 5


def _app(store: Any) -> Any:
    provider = CommandProvider()
    return create_app(make_settings(api_keys="key-t:t", subject_rate=f"{LIMIT}/minute"),
                      backend=store, worker=False,
                      resolve_provider=lambda spec: (provider, spec.split(":", 1)[-1]))


async def _limited(urls: list[str]) -> None:
    """Requests alternate between the servers at ``urls``: the user's count is one."""
    async with httpx.AsyncClient(base_url=urls[0]) as admin:
        minted = await admin.post("/client_tokens", json={"subject": "u1"},
                                  headers={"Authorization": "Bearer key-t"})
        token = minted.json()["token"]
        other = (await admin.post("/client_tokens", json={"subject": "u2"},
                                  headers={"Authorization": "Bearer key-t"})).json()["token"]
    statuses = []
    for n in range(LIMIT + 2):
        async with httpx.AsyncClient(base_url=urls[n % len(urls)]) as client:
            resp = await client.get("/runs", headers={"Authorization": f"Bearer {token}"})
            statuses.append(resp.status_code)
            if resp.status_code == 429:
                assert 1 <= int(resp.headers["Retry-After"]) <= 60
                assert resp.json()["error"]["code"] == "rate_limited"
    assert statuses == [200] * LIMIT + [429, 429]
    for url in urls:
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/runs", headers={"Authorization": f"Bearer {other}"})
                    ).status_code == 200
            assert (await client.get("/runs", headers={"Authorization": "Bearer key-t"})
                    ).status_code == 200


async def test_one_users_rate_in_one_process() -> None:
    with LiveServer(_app(MemoryBackend())) as server:
        await _limited([server.url])


async def test_one_users_rate_is_shared_by_two_api_processes(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    with ExitStack() as stack:
        servers = [stack.enter_context(LiveServer(_app(make_backend(redis_url, lease=5.0))))
                   for _ in range(2)]
        await _limited([s.url for s in servers])
