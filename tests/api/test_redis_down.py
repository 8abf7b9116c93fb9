"""Redis unreachable: the API answers 503 + Retry-After fast, never crashes, and recovers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.store import make_backend
from providers import fake
from tests.api.conftest import serve
from tests.support.redis_server import RedisServer
from tests.support.sse_client import read_all


@pytest.fixture
def server() -> Iterator[RedisServer]:
    s = RedisServer()
    s.start()
    try:
        yield s
    finally:
        s.cleanup()


async def test_503_with_retry_after_while_redis_is_down_then_recovery(server: RedisServer
                                                                       ) -> None:
    backend = make_backend(server.url, lease=5.0, run_ttl=3600)
    async with serve(backend=backend) as api:
        api.fake.script = [fake.text("first")]
        run = await api.create(input="hi", tools=[])
        await read_all(api.client, run["events_url"])

        server.stop()
        started = time.monotonic()
        resp = await api.client.post("/runs", json={"input": "hi", "tools": []})
        took = time.monotonic() - started
        assert resp.status_code == 503 and resp.headers["retry-after"]
        assert resp.json()["error"]["code"] and took < 1.5, took
        assert (await api.client.get(f"/runs/{run['id']}")).status_code == 503
        assert (await api.client.get("/readyz")).status_code == 503
        assert (await api.client.get("/healthz")).status_code == 200

        server.start()  # an empty Redis (no persistence): the service carries on
        api.fake.script.append(fake.text("second"))
        again = await api.create(input="hi again", tools=[])
        frames = await read_all(api.client, again["events_url"])
        assert frames[-1].event == "agent_end" and frames[-1].data["stop_reason"] == "stop"
        assert (await api.client.get("/readyz")).status_code == 200
