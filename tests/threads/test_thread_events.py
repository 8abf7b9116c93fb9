"""``GET /threads/{id}/events`` over a real socket with a real SSE client, on both backends:
one stream across runs, resumable across run boundaries, tailing the next run live."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tests.support.sse_client import Frame, SSEStream, open_stream
from tests.threads.conftest import ThreadApi


class Reader:
    """Reads one stream across several ``frames_until`` calls."""

    def __init__(self, stream: SSEStream) -> None:
        self.frames: AsyncIterator[Frame] = stream.__aiter__()


async def frames_until(stream: SSEStream | Reader, ends: int) -> list[Frame]:
    """Frames until the ``ends``-th run-level ``agent_end`` (the stream itself stays open; a
    ``Reader`` reads on from there)."""
    reader = stream.frames if isinstance(stream, Reader) else stream.__aiter__()
    out: list[Frame] = []
    seen = 0
    async with asyncio.timeout(60):
        while seen < ends:
            frame = await anext(reader)
            out.append(frame)
            if frame.event == "agent_end" and frame.data["depth"] == 0:
                seen += 1
    return out


async def test_one_stream_across_runs_tailing_the_next(tapi: ThreadApi) -> None:
    thread_id = await tapi.new_thread()
    url = f"/threads/{thread_id}/events"
    async with open_stream(tapi.client, url) as stream:
        assert stream.response.status_code == 200
        reader = Reader(stream)
        first = (await tapi.post(thread_id, "one", expect=201)).json()
        frames = await frames_until(reader, 1)
        await tapi.wait_idle(thread_id)
        second = (await tapi.post(thread_id, "two", expect=201)).json()  # while subscribed
        frames += await frames_until(reader, 1)
    runs = [f.data["run_id"] for f in frames]
    split = runs.index(second["id"])
    assert set(runs[:split]) == {first["id"]} and set(runs[split:]) == {second["id"]}
    assert frames[0].event == "run_created" and frames[split].event == "run_created"
    assert [f.id for f in frames[:2]] == ["1-1", "1-2"] and frames[split].id == "2-1"
    assert [f.data["seq"] for f in frames[split:]] == list(range(1, len(frames) - split + 1))
    users = [f.data["message"]["content"] for f in frames if f.event == "message_end"
             and f.data["message"]["role"] == "user"]
    assert users == ["one", "two"]


async def test_resume_across_run_boundaries(tapi: ThreadApi) -> None:
    thread_id = await tapi.new_thread()
    for text in ("one", "two"):
        run = (await tapi.post(thread_id, text, expect=201)).json()
        await tapi.wait_run(run["id"], "completed")
        await tapi.wait_idle(thread_id)
    url = f"/threads/{thread_id}/events"
    async with open_stream(tapi.client, url) as stream:
        everything = await frames_until(stream, 2)
    end_of_first = next(f for f in everything if f.event == "agent_end")
    async with open_stream(tapi.client, url, last_event_id=str(end_of_first.id)) as stream:
        rest = await frames_until(stream, 1)
    assert rest == everything[everything.index(end_of_first) + 1:]
    middle = everything[3]
    async with open_stream(tapi.client, url, params={"after": str(middle.id)}) as stream:
        again = await frames_until(stream, 2 if middle.id.startswith("1-") else 1)  # type: ignore[union-attr]
    assert again == everything[4:]


async def test_deleting_the_thread_closes_its_stream(tapi: ThreadApi) -> None:
    thread_id = await tapi.new_thread()
    async with open_stream(tapi.client, f"/threads/{thread_id}/events") as stream:
        assert (await tapi.client.delete(f"/threads/{thread_id}")).status_code == 204
        async with asyncio.timeout(30):
            frames = [frame async for frame in stream]
    assert frames == [] and stream.closed_by_server


async def test_errors_and_tokens(tapi: ThreadApi) -> None:
    thread_id = await tapi.new_thread()
    url = f"/threads/{thread_id}/events"
    for bad in ("7", "x-1", "1-99999999999999999999", "-1-2"):
        resp = await tapi.client.get(url, headers={"Last-Event-ID": bad})
        assert resp.status_code == 422, (bad, resp.text)
        assert resp.json()["error"]["field"] == "Last-Event-ID"
    assert (await tapi.client.get(url, params={"after": "a"})).status_code == 422
    missing = await tapi.client.get("/threads/thr_" + "0" * 32 + "/events")
    assert missing.status_code == 404


async def test_stream_tokens_are_scoped_to_the_thread() -> None:
    from tests.threads.conftest import serve_threads

    async with serve_threads("memory", api_keys="ka:alice") as tapi:
        tapi.client.headers["Authorization"] = "Bearer ka"
        thread_id = await tapi.new_thread()
        other_id = await tapi.new_thread()
        token = (await tapi.thread(thread_id))["stream_token"]
        del tapi.client.headers["Authorization"]
        url = f"/threads/{thread_id}/events"
        async with open_stream(tapi.client, url, params={"token": token}) as stream:
            assert stream.response.status_code == 200
        denied = await tapi.client.get(f"/threads/{other_id}/events", params={"token": token})
        assert denied.status_code == 401
        assert (await tapi.client.get(f"/threads/{thread_id}",
                                      params={"token": token})).status_code == 401
