"""A Redis Cluster master dies under the HTTP API: requests for its slots answer 503 with
Retry-After only until its replica is promoted; other runs and readiness are served
throughout; afterwards everything answers again without a restart."""

from __future__ import annotations

import asyncio

import pytest

from app.store import make_backend
from app.store.redis.backend import RedisBackend
from app.store.redis.keys import run_key
from providers import fake
from tests.api.conftest import serve
from tests.support.redis_cluster import RedisCluster
from tests.support.sse_client import read_all

pytestmark = pytest.mark.timeout(120)


def master_port(backend: RedisBackend, key: str) -> int:
    return int(backend.client.get_node_from_key(key).port)  # type: ignore[union-attr]


async def test_503_only_while_the_slot_has_no_master(cluster_url: str,
                                                     redis_cluster: RedisCluster) -> None:
    backend = make_backend(cluster_url, lease=10.0, run_ttl=3600, cluster=True)
    assert isinstance(backend, RedisBackend)
    async with serve(backend=backend) as api:
        api.fake.script = [fake.text("ok")] * 12
        runs = [await api.create(input="hi", tools=[]) for _ in range(12)]
        for run in runs:
            await read_all(api.client, run["events_url"])
        ports = [master_port(backend, run_key(r["id"])) for r in runs]
        victim = ports[0]
        lost = [r["id"] for r, p in zip(runs, ports, strict=True) if p == victim]
        kept = [r["id"] for r, p in zip(runs, ports, strict=True) if p != victim]
        assert kept, "12 runs all on one master"
        redis_cluster.kill(victim)
        try:
            statuses: list[int] = []
            async with asyncio.timeout(60):
                while True:
                    resp = await api.client.get(f"/runs/{lost[0]}")
                    statuses.append(resp.status_code)
                    if resp.status_code == 200:
                        break
                    assert resp.status_code == 503 and resp.headers["retry-after"]
                    assert (await api.client.get(f"/runs/{kept[0]}")).status_code == 200
                    assert (await api.client.get("/readyz")).status_code == 200
                    await asyncio.sleep(0.1)
            assert 503 in statuses
            for run_id in lost + kept:  # promoted: every run answers, nothing was lost
                assert (await api.client.get(f"/runs/{run_id}")).status_code == 200
        finally:
            redis_cluster.restart(victim)
            redis_cluster.wait_healthy()
