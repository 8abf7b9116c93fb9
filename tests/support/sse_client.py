"""A real streaming SSE client over ``httpx.AsyncClient.stream``.

Frames are parsed incrementally as bytes arrive (``providers._sse.SSEDecoder``, extended to keep
comment lines such as ``: ping``), and the client remembers the last ``id:`` so a reconnect can
send it as ``Last-Event-ID``::

    async with open_stream(client, f"/runs/{run_id}/events") as stream:
        async for frame in stream:
            ...
    async with open_stream(client, url, last_event_id=stream.last_event_id) as again: ...
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from providers._sse import SSEDecoder, SSEEvent


@dataclass
class Frame:
    id: int | str | None
    """The seq of a run's event; a thread stream's ``<n>-<seq>`` stays text."""
    event: str
    data: dict[str, Any]
    raw: str


class _CommentKeepingDecoder(SSEDecoder):
    def __init__(self, comments: list[str]) -> None:
        super().__init__()
        self.comments = comments

    def _line(self, line: str) -> SSEEvent | None:
        if line.startswith(":"):
            self.comments.append(line[1:].strip())
            return None
        return super()._line(line)


class SSEStream:
    def __init__(self, response: httpx.Response, last_event_id: str | None) -> None:
        self.response = response
        self.comments: list[str] = []
        self.last_event_id = last_event_id
        self.closed_by_server = False
        self._decoder = _CommentKeepingDecoder(self.comments)

    async def __aiter__(self) -> AsyncIterator[Frame]:
        async for chunk in self.response.aiter_raw():
            for event in self._decoder.feed(chunk):
                yield self._frame(event)
        for event in self._decoder.flush():
            yield self._frame(event)
        self.closed_by_server = True

    def _frame(self, event: SSEEvent) -> Frame:
        if event.id is not None:
            self.last_event_id = event.id
        data = json.loads(event.data) if event.data else {}
        frame_id = event.id or None
        if frame_id is not None and frame_id.isdigit():
            return Frame(int(frame_id), event.event, data, event.data)
        return Frame(frame_id, event.event, data, event.data)


@asynccontextmanager
async def open_stream(client: httpx.AsyncClient, url: str, *, last_event_id: str | None = None,
                      params: dict[str, str] | None = None,
                      headers: dict[str, str] | None = None) -> AsyncIterator[SSEStream]:
    hdrs = {"Accept": "text/event-stream", **(headers or {})}
    if last_event_id is not None:
        hdrs["Last-Event-ID"] = last_event_id
    async with client.stream("GET", url, params=params, headers=hdrs) as response:
        yield SSEStream(response, last_event_id)


async def read_all(client: httpx.AsyncClient, url: str, **kwargs: Any) -> list[Frame]:
    """Every frame until the server closes the stream."""
    async with open_stream(client, url, **kwargs) as stream:
        assert stream.response.status_code == 200, await stream.response.aread()
        return [frame async for frame in stream]
