"""The SSE stream of a run's log: replay, live tail, resume, fan-out, pings, outages.

Events are appended straight into the backend (on the server's loop), so these tests pin the
stream itself, independent of the worker.
"""

from __future__ import annotations

import asyncio

import httpx

from app.engine.events import AgentEnd, Event, TurnStart, encode_event_body, utc_now
from app.store.errors import BackendError
from app.store.memory.backend import MemoryBackend
from app.store.records import EventBatch
from providers.messages import Usage
from tests.api.conftest import Api, serve
from tests.support.sse_client import open_stream, read_all


def _batch(run_id: str, *events: Event) -> EventBatch:
    return EventBatch(events=[(e.type, encode_event_body(e, run_id=run_id, ts=utc_now()))
                              for e in events])


async def append(api: Api, run_id: str, *events: Event) -> None:
    await api.call(api.backend.append_events(run_id, None, _batch(run_id, *events)))


def turns(first: int, count: int) -> list[Event]:
    return [TurnStart(turn=n) for n in range(first, first + count)]


def end(depth: int = 0) -> AgentEnd:
    return AgentEnd(stop_reason="stop", error=None, usage=Usage(), messages=[], depth=depth)


async def test_replay_then_live_then_close_after_agent_end(api_no_worker: Api) -> None:
    api = api_no_worker
    run = await api.create()
    await append(api, run["id"], *turns(1, 3))
    async with open_stream(api.client, run["events_url"]) as stream:
        assert stream.response.status_code == 200
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        frames = []
        async for frame in stream:
            frames.append(frame)
            if len(frames) == 4:  # replayed; now the rest arrives live
                await append(api, run["id"], *turns(4, 2), end(depth=1), end())
        assert stream.closed_by_server
    assert [f.id for f in frames] == list(range(1, 9))
    assert [f.event for f in frames] == (["run_created"] + ["turn_start"] * 5
                                         + ["agent_end", "agent_end"])
    for f in frames:
        assert f.data["seq"] == f.id and f.data["type"] == f.event
        assert f.data["run_id"] == run["id"] and f.data["ts"].endswith("Z")
    assert frames[6].data["depth"] == 1 and frames[7].data["depth"] == 0


async def test_ended_run_replays_the_full_log_then_closes(api_no_worker: Api) -> None:
    api = api_no_worker
    run = await api.create()
    await append(api, run["id"], *turns(1, 2), end())
    frames = await read_all(api.client, run["events_url"])
    assert [f.id for f in frames] == [1, 2, 3, 4]
    after = await read_all(api.client, run["events_url"], params={"after": "2"})
    assert [f.id for f in after] == [3, 4]


async def test_disconnect_and_resume_with_last_event_id(api_no_worker: Api) -> None:
    api = api_no_worker
    run = await api.create()
    await append(api, run["id"], *turns(1, 4))
    async with open_stream(api.client, run["events_url"]) as stream:
        got = []
        async for frame in stream:
            got.append(frame.id)
            if len(got) == 2:
                break
        last = stream.last_event_id
    await append(api, run["id"], *turns(5, 2), end())
    rest = await read_all(api.client, run["events_url"], last_event_id=last)
    assert got + [f.id for f in rest] == list(range(1, 9))


async def test_three_subscribers_get_identical_streams(api_no_worker: Api) -> None:
    api = api_no_worker
    run = await api.create()

    async def produce() -> None:
        for n in range(1, 21):
            await append(api, run["id"], TurnStart(turn=n))
            await asyncio.sleep(0.005)
        await append(api, run["id"], end())

    readers = [read_all(api.client, run["events_url"]) for _ in range(3)]
    *streams, _ = await asyncio.gather(*readers, produce())
    raws = [[(f.id, f.raw) for f in s] for s in streams]
    assert raws[0] == raws[1] == raws[2]
    assert [i for i, _ in raws[0]] == list(range(1, 23))


async def test_idle_stream_gets_ping_comments(api_no_worker: Api) -> None:
    api = api_no_worker
    run = await api.create()
    async with open_stream(api.client, run["events_url"]) as stream:
        async def pinged() -> None:
            async for _ in stream:
                pass

        task = asyncio.create_task(pinged())
        await asyncio.sleep(0.7)  # ping interval is 0.2 s in tests
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert stream.comments.count("ping") >= 2


class FlakyBackend(MemoryBackend):
    down = False

    async def read_events(self, run_id, after, limit=1000):
        if self.down:
            raise BackendError("down")
        return await super().read_events(run_id, after, limit)

    async def wait_events(self, run_id, after, timeout, *, parked=False):  # noqa: ASYNC109
        if self.down:
            raise BackendError("down")
        return await super().wait_events(run_id, after, timeout, parked=parked)


async def test_stream_survives_a_backend_outage() -> None:
    backend = FlakyBackend()
    async with serve(backend=backend, worker=False) as api:
        run = await api.create()
        await append(api, run["id"], TurnStart(turn=1))
        async with open_stream(api.client, run["events_url"]) as stream:
            frames = []
            async for frame in stream:
                frames.append(frame)
                if len(frames) == 2:
                    backend.down = True
                    await asyncio.sleep(0.6)
                    await append(api, run["id"], TurnStart(turn=2), end())
                    backend.down = False
            assert stream.response.status_code == 200
        assert [f.id for f in frames] == [1, 2, 3, 4]
        assert "ping" in stream.comments


async def test_bad_after_is_422(api_no_worker: Api) -> None:
    run = await api_no_worker.create()
    resp = await api_no_worker.client.get(run["events_url"], params={"after": "x"})
    assert resp.status_code == 422 and resp.json()["error"]["field"] == "after"
    resp = await api_no_worker.client.get(run["events_url"], headers={"Last-Event-ID": "-1"})
    assert resp.status_code == 422


async def test_closed_client_is_dropped(api_no_worker: Api) -> None:
    run = await api_no_worker.create()
    async with httpx.AsyncClient(base_url=api_no_worker.url) as c, \
            open_stream(c, run["events_url"]) as stream:
        assert stream.response.status_code == 200
    await asyncio.sleep(0.3)
    text = (await api_no_worker.client.get("/metrics")).text
    assert "agentloop_sse_subscribers 0.0" in text
