"""The event loop ``agentloop serve`` runs on: uvloop, with new connections accepted in batches.

libuv (under uvloop, since libuv 1.45) accepts one connection per turn of the loop and relies
on the listening socket staying readable for the next. A turn of a loaded server runs every
callback that became ready meanwhile (hundreds of stream frames), so a burst of new browsers
waited in the kernel's accept queue one turn each: at 50 runs starting together (a closed loop
at C=50, or many users pressing send at once) the last connection was accepted ~130 ms after
its client connected, while the loop's own timer lag stayed under 4 ms (issue 33; measured with
``bench/first_event.py``). ``AcceptLoop.create_server`` listens itself and, each time the socket
is readable, accepts up to ``ACCEPT_BATCH`` connections and hands each to uvloop's transport
(``connect_accepted_socket``) as asyncio's own loop does::

    readable ─ accept × ≤ 64 (until EAGAIN) ─ TCP_NODELAY ─ connect_accepted_socket ─ protocol

Out of descriptors (``EMFILE``/``ENFILE``), it stops listening for a second (the queue waits
in the kernel) and logs it, as asyncio does. TLS and Unix sockets go to uvloop unchanged.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any

import uvloop

log = logging.getLogger(__name__)

ACCEPT_BATCH = 64
"""Connections taken per readiness of the listening socket: a burst empties in a turn or two,
and one turn never grows without bound."""
RETRY_AFTER_EMFILE_S = 1.0
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class BatchAcceptServer(asyncio.AbstractServer):
    """A listening TCP socket served from ``loop.add_reader``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sockets: list[socket.socket],
                 protocol_factory: Callable[[], asyncio.BaseProtocol]) -> None:
        self._loop = loop
        self._sockets = sockets
        self._factory = protocol_factory
        self._serving = False
        self._closed = asyncio.Event()
        self._pending: set[asyncio.Task[Any]] = set()

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        self._listen()

    async def serve_forever(self) -> None:
        self._listen()
        await self._closed.wait()

    def _listen(self) -> None:
        if self._serving or self._closed.is_set():
            return
        self._serving = True
        for sock in self._sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _pause(self) -> None:
        self._serving = False
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())

    def close(self) -> None:
        """Stop accepting (open connections go on, as with asyncio's ``Server``)."""
        if self._closed.is_set():
            return
        self._pause()
        for sock in self._sockets:
            sock.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno not in _OUT_OF_FDS:
                    raise
                log.error("out of file descriptors accepting connections (%s); accepting "
                          "again in %.0f s", exc, RETRY_AFTER_EMFILE_S)
                self._pause()
                self._loop.call_later(RETRY_AFTER_EMFILE_S, self._listen)
                return
            self._hand_over(conn)

    def _hand_over(self, conn: socket.socket) -> None:
        conn.setblocking(False)
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = self._loop.create_task(self._connect(conn))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError:  # the peer went away before its transport existed
            conn.close()
        except Exception:  # the loop is closing, or the protocol refused: this one only
            log.exception("a new connection could not be set up")
            conn.close()


class AcceptLoop(uvloop.Loop):
    """uvloop with ``create_server`` accepting in batches (see the module doc)."""

    async def create_server(  # type: ignore[override]
            self, protocol_factory: Callable[[], asyncio.BaseProtocol],
            host: str | Iterable[str] | None = None, port: int | None = None, *,
            sock: socket.socket | None = None, backlog: int = 100, ssl: Any = None,
            reuse_address: bool | None = None, reuse_port: bool | None = None,
            **kwargs: Any) -> asyncio.AbstractServer:
        if ssl is not None or kwargs or (sock is not None and sock.family == socket.AF_UNIX):
            uv: Any = super()  # uvloop's own, for what this class does not handle
            server: asyncio.AbstractServer = await uv.create_server(
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl,
                reuse_address=reuse_address, reuse_port=reuse_port, **kwargs)
            return server
        if sock is not None:
            sockets = [sock]
        else:
            sockets = await self._bind(host, port, reuse_address, reuse_port)
        for s in sockets:
            s.setblocking(False)
            s.listen(backlog)
        batch = BatchAcceptServer(self, sockets, protocol_factory)
        batch._listen()
        return batch

    async def _bind(self, host: str | Iterable[str] | None, port: int | None,
                    reuse_address: bool | None, reuse_port: bool | None) -> list[socket.socket]:
        """A listening socket per address ``host``/``port`` resolves to, as asyncio binds."""
        hosts: list[str | None] = ([host] if host is None or isinstance(host, str)
                                   else list(host)) or [None]
        infos: list[tuple[Any, ...]] = []
        for h in hosts:
            infos += await self.getaddrinfo(h or None, port, family=socket.AF_UNSPEC,
                                            type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        sockets: list[socket.socket] = []
        try:
            for family, type_, proto, _canon, address in dict.fromkeys(infos):
                s = socket.socket(family, type_, proto)
                sockets.append(s)
                if reuse_address is not False:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    s.bind(address)
                except OSError as exc:
                    raise OSError(exc.errno, f"error while attempting to bind on address "
                                             f"{address!r}: {exc.strerror}") from None
        except BaseException:
            for s in sockets:
                s.close()
            raise
        if not sockets:
            raise OSError(f"getaddrinfo({host!r}) returned no addresses")
        return sockets


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop factory ``agentloop serve`` gives uvicorn (``loop=`` import string)."""
    return AcceptLoop()
