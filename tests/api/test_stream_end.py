"""The end of a run's event stream, as a browser needs it (docs/events.md, "The end of a run").

After the run's own ``agent_end`` the stream closes; an ``EventSource`` then reconnects with
``Last-Event-ID`` = that seq and must get ``204`` (the HTML spec's "stop reconnecting"), not a
200 that keeps it reconnecting forever. The same holds for ``?after=`` and for a second tab.
The framing never gives SSE parsers a blank line without data (see ``test_sse_framing``).
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from app.engine.events import Event, MessageQueued, encode_event_body, utc_now
from app.store.records import EventBatch
from providers import fake
from tests.api.conftest import Api, serve
from tests.api.test_events import append, end, turns
from tests.support.sse_client import open_stream, read_all
from tool_registry import function


@function(toolsets=["api_testing"])
def stream_end_echo(text: str) -> str:
    """Echoes (test tool)."""
    return text


async def finish(api: Api, run_id: str, *events: Event) -> None:
    """Append ``events`` with the run's final status in the same batch (as the runner does)."""
    batch = EventBatch(events=[(e.type, encode_event_body(e, run_id=run_id, ts=utc_now()))
                               for e in events], fields={"status": "completed"})
    await api.call(api.backend.append_events(run_id, None, batch))


async def status_of(api: Api, url: str, **headers: str) -> int:
    return (await api.client.get(url, headers=headers)).status_code


async def test_every_way_back_into_an_ended_run_at_its_end_is_204(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("stream_end_echo", {"text": "x"})), fake.text("done")]
    run = await api.create(tools=["stream_end_echo"])
    frames = await read_all(api.client, run["events_url"])
    last = frames[-1].id
    assert frames[-1].event == "agent_end" and frames[-1].data["depth"] == 0
    await api.wait_status(run["id"], "completed")
    url = run["events_url"]
    # the browser's own reconnect, a second tab that remembered the position, ?after=
    resp = await api.client.get(url, headers={"Last-Event-ID": str(last)})
    assert resp.status_code == 204 and resp.content == b""
    assert "text/event-stream" not in resp.headers.get("content-type", "")
    assert await status_of(api, f"{url}?after={last}") == 204
    assert await status_of(api, f"{url}?after={last + 50}") == 204
    assert await status_of(api, f"{url}?after=1", **{"Last-Event-ID": str(last)}) == 204
    # with events left after the position: replay them, then close
    rest = await read_all(api.client, url, params={"after": str(last - 2)})
    assert [f.id for f in rest] == [last - 1, last]
    rest = await read_all(api.client, url, last_event_id=str(last - 1))
    assert [f.id for f in rest] == [last]


async def test_a_live_run_at_its_end_position_streams_on_then_204(api_no_worker: Api) -> None:
    api = api_no_worker
    run = await api.create()
    await append(api, run["id"], *turns(1, 2))
    async with open_stream(api.client, run["events_url"], last_event_id="3") as stream:
        assert stream.response.status_code == 200  # live: nothing yet, but more will come
        await finish(api, run["id"], end(depth=1), end())
        got = [frame.id async for frame in stream]
        assert stream.closed_by_server
    assert got == [4, 5]  # the nested agent_end (4) and the run's own (5)
    assert await status_of(api, run["events_url"], **{"Last-Event-ID": "5"}) == 204


async def test_a_nested_agent_end_does_not_end_the_stream(api_no_worker: Api) -> None:
    api = api_no_worker
    run = await api.create()
    await append(api, run["id"], *turns(1, 1), end(depth=1), *turns(2, 1))
    async with open_stream(api.client, run["events_url"]) as stream:
        got = []
        async for frame in stream:
            got.append((frame.id, frame.event, frame.data["depth"]))
            if frame.id == 4:
                await finish(api, run["id"], end())
    assert got[2] == (3, "agent_end", 1) and got[-1] == (5, "agent_end", 0)
    assert [g[0] for g in got] == [1, 2, 3, 4, 5]


async def test_an_ended_run_replays_what_is_left_without_waiting() -> None:
    """Events written after the run's end (older logs can hold a late ``message_queued``)
    are replayed and the stream closes at once: it never idles on an ended run."""
    async with serve(worker=False, sse_ping_seconds=60.0) as api:  # a wait would be 5 s
        run = await api.create()
        # today's store refuses any event after agent_end: an old log is written in one batch
        await finish(api, run["id"], end(), MessageQueued(message_id="m1", kind="steer"))
        started = time.monotonic()
        frames = await read_all(api.client, run["events_url"], last_event_id="2")
        assert [f.event for f in frames] == ["message_queued"]
        assert time.monotonic() - started < 4.0
        assert await status_of(api, run["events_url"], **{"Last-Event-ID": "3"}) == 204


async def test_a_stream_token_reconnect_after_the_end_is_204() -> None:
    async with serve(api_key="key-a", api_keys="key-a:alpha", worker=False) as api:
        run = await api.create()
        await finish(api, run["id"], end())
        url = f"{run['events_url']}?token={run['stream_token']}"
        async with httpx.AsyncClient(base_url=api.url) as anon:
            frames = await read_all(anon, url)
            assert [f.id for f in frames] == [1, 2]
            resp = await anon.get(url, headers={"Last-Event-ID": "2"})
            assert resp.status_code == 204
            assert (await anon.get(run["events_url"],
                                   headers={"Last-Event-ID": "2"})).status_code == 401


@pytest.mark.parametrize("seconds,field", [(1.0, b"retry: 1000\n"), (0.25, b"retry: 250\n")])
async def test_every_stream_opens_with_the_retry_field(seconds: float, field: bytes) -> None:
    async with serve(worker=False, sse_retry_seconds=seconds) as api:
        run = await api.create()
        async with api.client.stream("GET", run["events_url"]) as resp:
            first = await anext(resp.aiter_raw())
        assert first.startswith(field + b"id: 1\nevent: run_created\ndata: {")
        # nothing to replay (a live run at its end): the field comes first, alone
        async with api.client.stream("GET", run["events_url"],
                                     headers={"Last-Event-ID": "1"}) as resp:
            first = await anext(resp.aiter_raw())
        assert first == field


async def test_the_end_position_of_a_run_that_ends_while_connecting(api_no_worker: Api) -> None:
    """Many reconnects racing the end: each is a 200 that delivers the end or a 204, never an
    empty 200 held open (which is what kept browsers reconnecting)."""
    api = api_no_worker
    run = await api.create()
    await append(api, run["id"], *turns(1, 1))

    async def reconnect(position: str = "2") -> tuple[int, list[int]]:
        async with open_stream(api.client, run["events_url"], last_event_id=position) as stream:
            if stream.response.status_code != 200:
                return stream.response.status_code, []
            return 200, [f.id async for f in stream]

    readers = [asyncio.create_task(reconnect()) for _ in range(10)]
    await asyncio.sleep(0.05)
    await finish(api, run["id"], end())
    readers += [asyncio.create_task(reconnect()) for _ in range(10)]
    async with asyncio.timeout(10):
        results = await asyncio.gather(*readers)
    assert all(r in ((200, [3]), (204, [])) for r in results), results
    assert (await reconnect("3")) == (204, [])
