"""A loopback TCP proxy for tests: what a load balancer in front of the service does to a
stream, on demand.

``sever()`` cuts every open connection (a client must reconnect, e.g. an ``EventSource`` with
``Last-Event-ID``); ``idle_timeout`` closes a connection that carried no byte in either
direction for that long, as nginx's ``proxy_read_timeout`` or a cloud load balancer's idle
timeout do::

    async with TcpProxy(target_port, idle_timeout=1.0) as proxy:
        httpx.get(proxy.url + "/healthz")
        proxy.sever()
"""

from __future__ import annotations

import asyncio
import contextlib
import time

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target_port: int, *, idle_timeout: float | None = None) -> None:
        self.target_port = target_port
        self.idle_timeout = idle_timeout
        self.port = 0
        self.connections = 0
        """Connections accepted so far."""
        self.idle_closed = 0
        """Connections closed by ``idle_timeout``."""
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.sever()
        await asyncio.gather(*self._open, return_exceptions=True)
        await self._server.wait_closed()

    def sever(self) -> None:
        """Cut every open connection now."""
        for task in list(self._open):
            task.cancel()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.ensure_future(self._relay(reader, writer))
        self._open.add(task)
        task.add_done_callback(self._open.discard)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        last = [time.monotonic()]
        pumps = [asyncio.ensure_future(self._pump(reader, up_writer, last)),
                 asyncio.ensure_future(self._pump(up_reader, writer, last))]
        try:
            await self._until_done_or_idle(pumps, last)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.transport.abort()  # a hard cut, as a proxy dropping a connection does

    async def _until_done_or_idle(self, pumps: list[asyncio.Future[None]],
                                  last: list[float]) -> None:
        while True:
            done, _ = await asyncio.wait(pumps, timeout=0.05,
                                         return_when=asyncio.FIRST_COMPLETED)
            if done:
                return
            if self.idle_timeout and time.monotonic() - last[0] > self.idle_timeout:
                self.idle_closed += 1
                return

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    last: list[float]) -> None:
        while data := await reader.read(_CHUNK):
            last[0] = time.monotonic()
            writer.write(data)
            await writer.drain()
