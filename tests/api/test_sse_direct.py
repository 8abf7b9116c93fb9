"""Frames sent from the append (``app.delivery.direct``): a send that completes at once wakes no
task; one that cannot (the client is not reading) is handed to the stream's task, which
finishes it under the send deadline before anything else, so nothing is lost, repeated or
reordered — tested with fake sends and over a real socket whose reader stops."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httptools
import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

import app.delivery.sse
from app.delivery.direct import DirectSend
from app.delivery.send_deadline import SendDeadline
from app.delivery.server_send import StashServerSend, server_send
from app.telemetry import metrics
from providers import fake
from tests.api.conftest import Api, serve

_ID = re.compile(rb"^id: (\d+)$", re.M)
_BODY = "y" * 4000
_FRAMES = 300


def _attached(send: Any) -> tuple[DirectSend, asyncio.Event, asyncio.Event]:
    out = DirectSend()
    gone, stop = asyncio.Event(), asyncio.Event()
    out.attach(send, gone, stop)
    return out, gone, stop


async def test_a_send_that_completes_at_once_wakes_nothing() -> None:
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["body"])

    out, _, _ = _attached(send)
    woken: list[bool] = []
    out.send(b"a", lambda: woken.append(True))
    out.send(b"b", lambda: woken.append(True))
    assert sent == [b"a", b"b"] and not woken
    assert out.ready and not out.pending


async def test_a_send_that_suspends_is_finished_by_the_task_in_order() -> None:
    sent: list[bytes] = []
    writable = asyncio.get_running_loop().create_future()

    async def send(message: dict[str, Any]) -> None:
        if message["body"] == b"blocked":
            await writable  # the client's socket is full
        sent.append(message["body"])

    out, _, _ = _attached(send)
    woken: list[bool] = []
    out.send(b"blocked", lambda: woken.append(True))
    assert woken == [True] and out.pending and not out.ready  # later frames wait for it
    finishing = asyncio.ensure_future(out.finish())
    await asyncio.sleep(0)
    assert not finishing.done() and sent == []
    writable.set_result(None)
    await finishing
    assert sent == [b"blocked"] and out.ready


async def test_a_failed_send_is_raised_in_the_task() -> None:
    async def send(message: dict[str, Any]) -> None:
        raise OSError("broken pipe")

    out, _, _ = _attached(send)
    woken: list[bool] = []
    out.send(b"x", lambda: woken.append(True))
    assert woken == [True] and not out.ready
    with pytest.raises(OSError, match="broken pipe"):
        await out.finish()


async def test_a_gone_client_or_a_draining_server_takes_no_direct_send() -> None:
    async def send(message: dict[str, Any]) -> None:
        raise AssertionError("not to be sent")

    out, gone, stop = _attached(send)
    gone.set()
    assert not out.ready
    out, gone, stop = _attached(send)
    stop.set()
    assert not out.ready
    assert not DirectSend().ready  # before the response attaches
    out, _, _ = _attached(send)
    out.detach()
    assert not out.ready


async def test_an_unfinished_send_is_cancelled_with_its_task() -> None:
    closed: list[bool] = []

    async def send(message: dict[str, Any]) -> None:
        try:
            await asyncio.get_running_loop().create_future()  # never writable
        except asyncio.CancelledError:
            closed.append(True)
            raise

    out, _, _ = _attached(send)
    out.send(b"x", lambda: None)
    task = asyncio.ensure_future(out.finish())
    await asyncio.sleep(0)
    task.cancel()  # what the send deadline does
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == [True]


@pytest.fixture
def handed_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Set when a frame sent from the append could not finish at once (handed to the task)."""
    event = threading.Event()
    send = DirectSend.send

    def recording(self: DirectSend, body: bytes, wake: Callable[[], None]) -> None:
        send(self, body, wake)
        if self.unfinished is not None:
            event.set()

    monkeypatch.setattr(DirectSend, "send", recording)
    yield event


@pytest.fixture(params=["memory", "redis"])
async def slow_api(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    backend = None
    if request.param == "redis":  # frames pushed from the notes reader's callback
        from app.store import make_backend

        backend = make_backend(request.getfixturevalue("redis_url"), lease=5.0, run_ttl=3600)
    async with serve(backend=backend) as api:
        api.server.limit_send_buffer(8192)  # a few frames fill it
        api.fake.script = [fake.text(_BODY * _FRAMES, chunks=_FRAMES, delay=0.002)]
        yield api


class _RawStream:
    """An event stream read from a plain socket with small buffers, so that not reading
    soon blocks the server's sends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.body = bytearray()
        self.complete = False
        self._parser = httptools.HttpResponseParser(self)

    @classmethod
    async def open(cls, api: Api, run_id: str) -> _RawStream:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", api.server.port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
        writer.write(f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: t\r\n"
                     "Accept: text/event-stream\r\n\r\n".encode())
        return cls(reader, writer)

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True

    async def read_until(self, done: Callable[[], bool]) -> None:
        while not done():
            data = await asyncio.wait_for(self.reader.read(65536), 20)
            if not data:
                return
            self._parser.feed_data(data)

    def ids(self) -> list[int]:
        return [int(m) for m in _ID.findall(bytes(self.body))]

    def close(self) -> None:
        self.writer.close()


async def test_a_reader_that_pauses_gets_every_frame_once_in_order(
        slow_api: Api, handed_off: threading.Event) -> None:
    run = await slow_api.create()
    stream = await _RawStream.open(slow_api, run["id"])
    try:
        await stream.read_until(lambda: len(stream.ids()) >= 3)  # live, then stop reading
        assert await asyncio.to_thread(handed_off.wait, 30), "no send was handed to a task"
        await stream.read_until(lambda: stream.complete)
        ids = stream.ids()
        assert ids == list(range(1, len(ids) + 1))
        assert ids[-1] > _FRAMES and b"event: agent_end" in stream.body.rsplit(b"id: ", 1)[1]
        assert len(stream.body) > _FRAMES * len(_BODY)  # every delta came through
    finally:
        stream.close()


async def test_a_reader_that_stops_is_dropped_and_the_other_reader_gets_everything(
        slow_api: Api, handed_off: threading.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app.delivery.sse, "SendDeadline", lambda seconds: SendDeadline(0.5))
    open_before = metrics.SSE_SUBSCRIBERS._value.get()
    run = await slow_api.create()
    stuck = await _RawStream.open(slow_api, run["id"])
    try:
        await stuck.read_until(lambda: len(stuck.ids()) >= 3)
        # the other reader's connection (a new one) gets room for the whole run: its sends
        # never wait on a reader sharing this process's CPU with the server, against the
        # short deadline
        slow_api.server.limit_send_buffer(4 << 20)
        seqs: list[int] = []
        async with httpx.AsyncClient(base_url=slow_api.url, timeout=20) as other, \
                other.stream("GET", f"/runs/{run['id']}/events") as resp:
            async for line in resp.aiter_lines():
                if line.startswith("id: "):
                    seqs.append(int(line[4:]))
        assert seqs == list(range(1, seqs[-1] + 1)) and seqs[-1] > _FRAMES
        assert await asyncio.to_thread(handed_off.wait, 30), "no send was handed to a task"
        for _ in range(2000):  # the stuck stream ends by its send deadline, not by the run
            if metrics.SSE_SUBSCRIBERS._value.get() == open_before:
                break
            await asyncio.sleep(0.01)
        assert metrics.SSE_SUBSCRIBERS._value.get() == open_before
        await stuck.read_until(lambda: stuck.complete)  # what was buffered, then the close
        ids = stuck.ids()
        assert ids == list(range(1, len(ids) + 1)) and ids[-1] < seqs[-1]
        assert not stuck.complete
    finally:
        stuck.close()


async def test_body_chunks_skip_the_inner_middleware_only_for_a_get() -> None:
    seen: list[tuple[str, Send | None]] = []

    async def app_(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope["method"], server_send(scope)))

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        return None

    stash = StashServerSend(app_)
    for method in ("GET", "HEAD", "POST"):
        await stash({"type": "http", "method": method}, receive, send)
    assert seen == [("GET", send), ("HEAD", None), ("POST", None)]
    # HeadAsGet turns HEAD into GET for the route: the recorded method still says HEAD
    scope: Scope = {"type": "http", "method": "HEAD"}
    await stash(scope, receive, send)
    assert server_send({**scope, "method": "GET"}) is None
