"""A lean HTTP/1.1 transport for httpx: asyncio protocol + httptools (C) parser, keep-alive pool.

httpx's default transport (httpcore + h11 + anyio) cost ~0.7 ms of CPU per streamed model call
on this machine (``bench/providers.py``, py-spy on the service); this one does the same
request in a fraction of that. It speaks HTTP/1.1 only, so the service mounts it for
``http://`` (local and in-cluster model servers: vLLM, Ollama, gateways) and keeps httpcore's
HTTP/2 for ``https://`` providers unless HTTP/2 is turned off.

Contract: ``handle_async_request`` returns once the status line and headers are in; the body
streams as it arrives. A response read to its end returns its connection to the pool; one
closed early closes its connection. Failures map to httpx's exceptions (``ConnectError``,
``ConnectTimeout``, ``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``, ``WriteError``) so
callers' retry rules apply unchanged. A request that fails on a reused idle connection before
any byte of the answer arrived is retried once on a fresh connection.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import cast

import httptools
import httpx

Key = tuple[str, str, int]
BODY = "agentloop.body"
"""The response extension holding the body stream itself: httpx wraps a transport's stream in
one more generator layer per chunk, which a reader of this transport's bodies can skip
(``providers._http.body_chunks``); closing still goes through httpx's wrapper."""


class _Conn(asyncio.Protocol):
    """One connection: feeds received bytes to the parser, hands body chunks to the reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.received = False
        self.error: Exception | None = None
        self.loop = asyncio.get_running_loop()  # kept: the lookup costs a getpid per frame
        self.waiter: asyncio.Future[None] | None = None
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"invalid HTTP response: {exc}"))
            return
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.complete:
            self._fail(httpx.RemoteProtocolError("server closed the connection mid-response")
                       if exc is None else httpx.ReadError(str(exc)))
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        # asked here: after the parser moves on (e.g. all bytes came in one read) it forgets
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True

    # -- used by the transport --------------------------------------------------------
    def reset(self) -> None:
        """Ready for the next request on a kept-alive connection."""
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers = []
        self.chunks.clear()
        self.headers_done = self.complete = self.received = self.keep_alive = False
        self.error = None

    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    async def wait(self, timeout: float | None) -> None:  # noqa: ASYNC109 (a timer, not a scope)
        """Until more arrives (or the connection fails); ``ReadTimeout`` after ``timeout``.

        One timer per connection, re-armed lazily (``_check_deadline``), instead of one per
        wait: a streamed reply waits once per frame."""
        if self.error is not None:
            raise self.error
        loop = self.loop
        self.waiter = loop.create_future()
        self.deadline = loop.time() + timeout if timeout else math.inf
        if self.timer is None and timeout:
            self.timer = loop.call_at(self.deadline, self._check_deadline)
        try:
            await self.waiter
        finally:
            self.waiter = None
        if self.error is not None:
            raise self.error

    def _check_deadline(self) -> None:
        self.timer = None
        if self.waiter is None:
            return  # not waiting: the next wait arms a timer again
        loop = self.loop
        if loop.time() < self.deadline:
            if self.deadline < math.inf:
                self.timer = loop.call_at(self.deadline, self._check_deadline)
            return
        self._fail(httpx.ReadTimeout("timed out waiting for the server"))
        self._wake()
        self.close()

    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class _Body(httpx.AsyncByteStream):
    """The streamed response body; gives the connection back when read to the end."""

    def __init__(self, transport: LeanHTTP1Transport, key: Key, conn: _Conn,
                 read_timeout: float | None) -> None:
        self._transport = transport
        self._key = key
        self._conn = conn
        self._timeout = read_timeout
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            while conn.chunks:
                yield conn.chunks.popleft()
            if conn.complete:
                break
            await conn.wait(self._timeout)
        self._finish(reusable=conn.keep_alive)

    async def aclose(self) -> None:
        # a reader that stops at its protocol's own end marker ([DONE], message_stop) usually
        # has the whole HTTP message in already: then the connection is clean to reuse
        self._finish(reusable=self._conn.complete and self._conn.keep_alive)

    def _finish(self, *, reusable: bool) -> None:
        if self._done:
            return
        self._done = True
        conn = self._conn
        if reusable and conn.complete and conn.usable():
            self._transport.give_back(self._key, conn)
        else:
            conn.close()


class LeanHTTP1Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive; see the module docstring."""

    def __init__(self, *, max_idle_per_host: int = 100, verify: ssl.SSLContext | bool = True
                 ) -> None:
        self._idle: dict[Key, list[_Conn]] = {}
        self._max_idle = max_idle_per_host
        if isinstance(verify, ssl.SSLContext):
            self._ssl: ssl.SSLContext = verify
        else:
            self._ssl = ssl.create_default_context()
            if not verify:
                self._ssl.check_hostname = False
                self._ssl.verify_mode = ssl.CERT_NONE

    def give_back(self, key: Key, conn: _Conn) -> None:
        """Keep a finished connection for the next request to the same host."""
        idle = self._idle.setdefault(key, [])
        if len(idle) < self._max_idle:
            conn.reset()
            idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        port = url.port or (443 if scheme == "https" else 80)
        key: Key = (scheme, url.host, port)
        timeouts = request.extensions.get("timeout", {})
        payload = _serialize(request, await request.aread())
        reused = self._take_idle(key)
        if reused is not None:
            try:
                return await self._exchange(key, reused, payload, timeouts)
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
                if reused.received:
                    raise
                # the server closed the idle connection before we wrote: try a fresh one
        conn = await self._connect(key, timeouts.get("connect"))
        return await self._exchange(key, conn, payload, timeouts)

    def _take_idle(self, key: Key) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn
        return None

    async def _connect(self, key: Key, timeout: float | None) -> _Conn:  # noqa: ASYNC109
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ctx = self._ssl if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                transport, conn = await loop.create_connection(
                    _Conn, host, port, ssl=ctx, server_hostname=host if ctx else None)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        if conn.transport is None:  # uvloop may call connection_made only on the next tick
            conn.connection_made(transport)
        return conn

    async def _exchange(self, key: Key, conn: _Conn, payload: bytes,
                        timeouts: dict[str, float | None]) -> httpx.Response:
        if conn.transport is None:
            raise httpx.WriteError("connection closed")
        conn.transport.write(payload)
        read_timeout = timeouts.get("read")
        try:
            while not conn.headers_done:
                await conn.wait(read_timeout)
        except BaseException:
            conn.close()
            raise
        stream = _Body(self, key, conn, read_timeout)
        return httpx.Response(conn.status, headers=conn.headers, stream=stream,
                              extensions={"http_version": b"HTTP/1.1", BODY: stream})


def _serialize(request: httpx.Request, body: bytes) -> bytes:
    target = request.url.raw_path
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), target)]
    has_length = False
    for name, value in request.headers.raw:
        lower = name.lower()
        if lower == b"transfer-encoding":
            continue  # the body is sent whole, with a content-length
        if lower == b"content-length":
            has_length = True
        lines.append(name + b": " + value)
    if body and not has_length:
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
