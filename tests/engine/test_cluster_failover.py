"""A master of the Redis Cluster is killed while runs stream and steers pour in; its replica is
promoted. Every run completes, each event log is 1..n with no gap and no duplicate, what the
tailing clients saw (reconnecting from their last seq, as SSE clients with ``Last-Event-ID``)
is exactly the stored log, and every steer the backend accepted reached its run once."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import orjson
import pytest

from app.config import Settings
from app.engine.queues import QueuedMessage
from app.store import Backend, BackendError, RunRecord, make_backend
from app.store.records import TERMINAL
from app.store.redis.backend import RedisBackend
from app.store.redis.keys import JOBS_STREAM, inflight_key, queue_key, run_key
from providers import fake
from providers.base import ModelRequest
from providers.fake import FakeProvider, Step
from providers.messages import UserMessage
from tests.engine import scripted
from tests.engine.harness import events, new_record, worker
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.timeout(120)
FINISH = "finish"
LEASE, HEARTBEAT = Settings.model_fields["lease_seconds"].default, \
    Settings.model_fields["heartbeat_seconds"].default
"""The service defaults (5 s, 1 s): the failover must not need a longer lease."""


def until_finish(request: ModelRequest) -> Step:
    """Nap in rounds until the last user message says ``finish``, then answer "done"."""
    users = [m for m in request.messages if isinstance(m, UserMessage)]
    if users and users[-1].content == FINISH:
        return fake.text("done", chunks=3)
    n = scripted.tool_results(request)
    return fake.tool_calls(("nap", {"seconds": 0.2}, f"call_{n}"), text_before=f"round {n}",
                           arg_chunks=3)


@pytest.fixture
async def cluster_backends(cluster_url: str
                           ) -> AsyncIterator[tuple[RedisBackend, RedisBackend, RedisBackend]]:
    """The clients' backend and two workers' (separate connections, as separate processes:
    a run whose lease lapses in the outage is taken over by the other worker)."""
    made = [make_backend(cluster_url, lease=LEASE, run_ttl=3600, cluster=True) for _ in range(3)]
    for b in made:
        await b.start()
    try:
        yield made[0], made[1], made[2]  # type: ignore[misc]
    finally:
        for b in made:
            await b.close()


def master_port(backend: RedisBackend, key: str) -> int:
    node = backend.client.get_node_from_key(key)  # type: ignore[union-attr]
    return int(node.port)


async def tail(backend: Backend, run_id: str, arrivals: list[float] | None = None
               ) -> list[tuple[int, bytes]]:
    """A client following the run to its end, resuming after its last seq when the store
    fails (as an SSE client reconnects with Last-Event-ID); when each page of events came
    goes to ``arrivals``."""
    seen: list[tuple[int, bytes]] = []
    loop = asyncio.get_running_loop()
    while True:
        try:
            got = await backend.wait_events(run_id, seen[-1][0] if seen else 0, timeout=1)
        except BackendError:
            await asyncio.sleep(0.1)
            continue
        if got and arrivals is not None:
            arrivals.append(loop.time())
        seen += [(e.seq, e.data) for e in got]
        if any(e.type == "agent_end" for e in got):
            return seen


async def steer_storm(backend: Backend, runs: list[RunRecord], stop: asyncio.Event
                      ) -> tuple[dict[str, list[str]], set[str]]:
    """Steers round-robin over the runs until ``stop``: the ones the backend accepted, and
    those whose call failed (a 503 to a client: the steer may or may not be queued — e.g. it
    was written but no replica confirmed it before the master died)."""
    accepted: dict[str, list[str]] = {r.id: [] for r in runs}
    unknown: set[str] = set()
    for n in itertools.count():
        if stop.is_set():
            return accepted, unknown
        run = runs[n % len(runs)]
        text = f"steer {n}"
        try:
            await backend.enqueue(run.id, "steer", QueuedMessage(
                id=f"s{n}", message=UserMessage(content=text)))
            accepted[run.id].append(text)
        except BackendError:
            unknown.add(text)
        await asyncio.sleep(0.03)
    raise AssertionError("unreachable")


async def finished(backend: Backend, run_id: str) -> RunRecord:
    async with asyncio.timeout(60):
        while True:
            with contextlib.suppress(BackendError):
                rec = await backend.get_run(run_id)
                if rec is not None and rec.status in TERMINAL:
                    return rec
            await asyncio.sleep(0.1)


async def runs_around(backend: RedisBackend, victim: int, each: int) -> list[RunRecord]:
    """``each`` runs on the victim master and ``each`` elsewhere, all created."""
    on, off = [], []
    while len(on) < each or len(off) < each:
        rec = new_record(max_iterations=1000)  # runs last as long as the storm: no cap
        side = on if master_port(backend, run_key(rec.id)) == victim else off
        if len(side) < each:
            side.append(rec)
    for rec in on + off:
        await backend.create_run(rec)
    return on + off


async def test_master_failover_while_runs_stream(
        cluster_backends: tuple[RedisBackend, RedisBackend, RedisBackend],
        redis_cluster: RedisCluster) -> None:
    api, store, other = cluster_backends
    victim = master_port(api, JOBS_STREAM)  # dispatch and some runs lose their master
    resolve = scripted.resolver(lambda: FakeProvider(script=[until_finish], repeat=True))
    try:
        async with worker(store, resolve, lease=LEASE, heartbeat=HEARTBEAT), \
                worker(other, resolve, lease=LEASE, heartbeat=HEARTBEAT):
            runs = await runs_around(api, victim, 3)
            arrivals: dict[str, list[float]] = {r.id: [] for r in runs}
            tails = [asyncio.create_task(tail(api, r.id, arrivals[r.id])) for r in runs]
            stop = asyncio.Event()
            storm = asyncio.create_task(steer_storm(api, runs, stop))
            await asyncio.sleep(1.0)
            redis_cluster.kill(victim)
            assert await api.ping()  # /readyz: the service is up, one shard fails over
            loop = asyncio.get_running_loop()
            t_kill = loop.time()
            outage, elsewhere = await until_served(api, runs[0].id, runs[-1].id)
            took = loop.time() - t_kill
            await asyncio.sleep(1.0)
            stop.set()
            accepted, unknown = await storm
            for r in runs:
                await api.enqueue(r.id, "steer", QueuedMessage(
                    id=f"fin-{r.id}", message=UserMessage(content=FINISH)))
            seen = await asyncio.wait_for(asyncio.gather(*tails), 60)
            ends = [await finished(api, r.id) for r in runs]
    finally:
        redis_cluster.restart(victim)
        redis_cluster.wait_healthy()
    on_victim = [r.id for r in runs[:3]]  # runs_around puts the victim's runs first
    resumed = max(min(t for t in arrivals[i] if t > t_kill) - t_kill for i in on_victim)
    taken_over = sum(e.count(b'"type":"run_resumed"') for view in seen for _, e in view)
    print(f"slot without a master for {took:.2f}s ({outage} failed calls); every run on it "
          f"streaming again {resumed:.2f}s after the kill; {taken_over} runs taken over "
          f"(lease {LEASE}s, heartbeat {HEARTBEAT}s); {len(unknown)} steer calls failed")
    assert elsewhere == 0  # a run on a healthy master was served throughout
    assert [(e.status, e.stop_reason) for e in ends] == [("completed", "stop")] * len(ends)
    for run, client_view in zip(runs, seen, strict=True):
        await assert_clean(api, run, client_view, accepted[run.id], unknown)


async def until_served(backend: Backend, run_id: str, elsewhere: str) -> tuple[int, int]:
    """Poll a run on the killed master until its slot is served again, and one on a healthy
    master meanwhile: how many calls failed for each."""
    failed, other = 0, 0
    async with asyncio.timeout(30):
        while True:
            try:
                await backend.get_run(elsewhere)
            except BackendError:
                other += 1
            try:
                await backend.get_run(run_id)
                if failed:
                    return failed, other
            except BackendError:
                failed += 1
            await asyncio.sleep(0.05)


async def assert_clean(backend: Backend, run: RunRecord, client_view: list[tuple[int, bytes]],
                       steers: list[str], unknown: set[str]) -> None:
    stored = await backend.read_events(run.id, 0, limit=100000)
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))  # no gap, no duplicate
    assert client_view == [(e.seq, e.data) for e in stored]  # clients saw exactly the log
    log = await events(backend, run.id)
    types = [e["type"] for e in log]
    assert types.count("agent_start") == 1 and types[-1] == "agent_end"
    users = [e["message"]["content"] for e in log
             if e["type"] == "message_end" and e["message"]["role"] == "user"]
    injected = [u for u in users if u.startswith("steer ")]
    why = await diagnosis(backend, run.id, log)
    assert len(injected) == len(set(injected)), why  # none twice
    assert set(steers) <= set(injected), why  # every accepted steer
    assert set(injected) - set(steers) <= unknown, why  # besides, only those of a failed call
    assert users[-1] == FINISH, why
    assert orjson.loads(stored[-1].data)["type"] == "agent_end"


async def diagnosis(backend: Backend, run_id: str, log: list[dict[str, object]]) -> str:
    """What a failure message needs: the run's queue, in-flight list and last events."""
    client = backend.client  # type: ignore[attr-defined]
    queued = await client.lrange(queue_key(run_id, "steer"), 0, -1)
    inflight = await client.lrange(inflight_key(run_id, "steer"), 0, -1)
    tail = [(e["type"], e.get("stop_reason"), str(e.get("message", ""))[:80]) for e in log[-8:]]
    return f"queued {queued}, in flight {inflight}, last events {tail}"
