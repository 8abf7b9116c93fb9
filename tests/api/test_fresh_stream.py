"""A stream opened right after ``POST /runs`` on the Redis backend starts from what the create
wrote (``app.store.fresh_runs``): no store read for its first page, the same frames as a
replay from the store, the same tenant check, and the log read as usual after seq 1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.store import make_backend
from app.store.errors import BackendError
from app.store.fresh_runs import FreshRuns
from app.store.redis.backend import RedisBackend
from tests.api.conftest import Api, serve
from tests.api.test_events import _batch, append, end, turns
from tests.support.redis_server import RedisServer
from tests.support.sse_client import Frame, SSEStream, open_stream, read_all

KEYS = "key-a:alpha,key-b:beta"


def redis_backend(url: str) -> RedisBackend:
    backend = make_backend(url, lease=5.0, run_ttl=3600)
    assert isinstance(backend, RedisBackend)
    return backend


def count_first_pages(backend: RedisBackend) -> list[int]:
    """Counts the stream-opening store reads (``get_run_and_events``) from now on."""
    calls: list[int] = []
    read = backend.get_run_and_events

    async def counted(run_id: str, after: int, limit: int) -> Any:
        calls.append(after)
        return await read(run_id, after, limit)

    backend.get_run_and_events = counted  # type: ignore[method-assign]
    return calls


@pytest.fixture
async def api_redis(redis_url: str) -> AsyncIterator[Api]:
    async with serve(backend=redis_backend(redis_url), worker=False) as running:
        yield running


def raws(frames: list[Frame]) -> list[tuple[int | str | None, str, str]]:
    return [(f.id, f.event, f.raw) for f in frames]


async def replay_from_store(api: Api, url: str) -> list[Frame]:
    """The run's whole stream as a process that did not create it serves it."""
    api.backend.fresh_runs = FreshRuns()
    return await read_all(api.client, url)


async def test_a_new_runs_stream_starts_without_a_store_read_and_tails_the_log(
        api_redis: Api) -> None:
    api = api_redis
    reads = count_first_pages(api.backend)
    run = await api.create()
    async with open_stream(api.client, run["events_url"]) as stream:
        assert stream.response.status_code == 200
        frames = []
        async for frame in stream:
            frames.append(frame)
            if len(frames) == 1:  # seq 1 from the create; the rest arrives from the log
                await append(api, run["id"], *turns(1, 3), end())
        assert stream.closed_by_server
    assert reads == []
    assert [(f.id, f.event) for f in frames] == [(1, "run_created"), (2, "turn_start"),
                                                (3, "turn_start"), (4, "turn_start"),
                                                (5, "agent_end")]
    assert raws(frames) == raws(await replay_from_store(api, run["events_url"]))
    assert reads == [0]


async def test_a_run_that_ended_before_its_stream_opened_streams_to_its_end(
        api_redis: Api) -> None:
    """Nothing remembered says the run is live: the stream learns the end from the log."""
    api = api_redis
    reads = count_first_pages(api.backend)
    run = await api.create()
    await append(api, run["id"], *turns(1, 2), end())
    frames = await read_all(api.client, run["events_url"])
    assert [f.id for f in frames] == [1, 2, 3, 4] and frames[-1].event == "agent_end"
    assert reads == []  # opened from the create, not from the store
    assert raws(frames) == raws(await replay_from_store(api, run["events_url"]))


async def test_two_streams_opened_at_once_each_get_every_event_once(api_redis: Api) -> None:
    """A page that opens its stream twice (a remount, a second tab) right after the create."""
    api = api_redis
    reads = count_first_pages(api.backend)
    run = await api.create()
    opened = asyncio.Event()

    async def one() -> list[Frame]:
        async with open_stream(api.client, run["events_url"]) as stream:
            frames = []
            async for frame in stream:
                frames.append(frame)
                opened.set()
            return frames

    readers = [asyncio.create_task(one()) for _ in range(2)]
    await opened.wait()
    await append(api, run["id"], *turns(1, 2), end())
    first, second = await asyncio.gather(*readers)
    assert raws(first) == raws(second) and [f.id for f in first] == [1, 2, 3, 4]
    assert reads == []


async def test_a_resumed_stream_and_an_expired_entry_read_the_store(api_redis: Api) -> None:
    api = api_redis
    reads = count_first_pages(api.backend)
    run = await api.create()
    await append(api, run["id"], *turns(1, 2), end())
    resumed = await read_all(api.client, run["events_url"], last_event_id="2")
    assert [f.id for f in resumed] == [3, 4] and reads == [2]
    api.backend.fresh_runs.ttl = 0.0
    other = await api.create()
    await append(api, other["id"], end())
    assert [f.id for f in await read_all(api.client, other["events_url"])] == [1, 2]
    assert reads == [2, 0]


async def test_another_tenant_gets_404_for_a_run_just_created(redis_url: str) -> None:
    async with serve(backend=redis_backend(redis_url), api_key="key-a", api_keys=KEYS,
                     worker=False) as api, \
            httpx.AsyncClient(base_url=api.url,
                              headers={"Authorization": "Bearer key-b"}) as beta:
        run = await api.create()
        assert api.backend.fresh_runs.get(run["id"]) is not None
        async with beta.stream("GET", run["events_url"]) as resp:  # returns at the headers
            assert resp.status_code == 404  # (a 200 here would stream forever: not read)
        await append(api, run["id"], end())
        assert [f.id for f in await read_all(api.client, run["events_url"])] == [1, 2]


async def test_a_run_driven_by_the_worker_streams_the_same_from_the_create(
        redis_url: str) -> None:
    from providers.fake import text

    async with serve(backend=redis_backend(redis_url)) as api:
        reads = count_first_pages(api.backend)
        api.fake.script = [text("hello there", chunks=3)]
        run = await api.create()
        frames = await read_all(api.client, run["events_url"])
        assert reads == []
        assert frames[0].event == "run_created" and frames[-1].event == "agent_end"
        assert [f.id for f in frames] == list(range(1, len(frames) + 1))
        assert raws(frames) == raws(await replay_from_store(api, run["events_url"]))


async def test_a_new_runs_stream_opened_during_an_outage_waits_it_out() -> None:
    """docs/events.md: the first page needs no store, so the stream opens at 200 and pings
    through the outage (a stream that must read the store first gets 503); the run's events
    follow once Redis is back."""
    server = RedisServer(persist=True)  # restarts with its data
    server.start()
    try:
        async with serve(backend=redis_backend(server.url), worker=False) as api:
            run = await api.create()
            server.stop()

            async def back_when_pinged(stream: SSEStream) -> None:
                while "ping" not in stream.comments:  # the stream is waiting the outage out
                    await asyncio.sleep(0.02)
                await asyncio.to_thread(server.start)
                await api.call(retrying_append(api, run["id"]))

            async with open_stream(api.client, run["events_url"]) as stream:
                assert stream.response.status_code == 200
                frames, task = [], None
                async for frame in stream:
                    frames.append(frame)
                    if task is None:
                        task = asyncio.create_task(back_when_pinged(stream))
                assert stream.closed_by_server and task is not None
                await task
            assert [(f.id, f.event) for f in frames] == [(1, "run_created"), (2, "turn_start"),
                                                        (3, "agent_end")]
    finally:
        server.cleanup()


async def retrying_append(api: Api, run_id: str) -> None:
    """The events, once the backend has reconnected (on the server's loop)."""
    batch = _batch(run_id, *turns(1, 1), end())
    for _ in range(200):
        try:
            await api.backend.append_events(run_id, None, batch)
            return
        except BackendError:
            await asyncio.sleep(0.05)
    raise AssertionError("Redis did not come back")
