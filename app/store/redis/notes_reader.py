"""The notes listener's lean read path: one plain connection subscribed to the notes channel,
its RESP replies parsed by hiredis in the protocol's ``data_received`` and each note handed to
the notifier there, with no listener task to wake per note and no message dict per note (what
``redis.asyncio.client.PubSub.listen`` costs)::

    connect ─ AUTH (if a password) ─ SUBSCRIBE al:notify ─ confirmed ─▶ ready
    bytes arrive ─ hiredis ─ ["message", channel, note] ─▶ on_note(note)   (in the callback)
    connection lost ─▶ ``closed`` resolves ─▶ the notifier reconnects (as after any outage)

Used for plain TCP and unix-socket URLs; TLS, credential providers and anything else
``lean_params`` does not recognise keep redis-py's pub/sub (``redis_notify.Notifier``). The
script calls take the same lean way (``redis_lean_scripts``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import hiredis
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection

P = TypeVar("P", bound=asyncio.Protocol)


@dataclass(frozen=True, slots=True)
class LeanParams:
    """Where and how the notes connection connects."""

    host: str
    port: int
    path: str | None
    username: str | None
    password: str | None
    connect_timeout: float
    db: int = 0


def lean_params(client: Redis) -> LeanParams | None:
    """The client's connection settings if the lean reader can use them, else None."""
    pool = client.connection_pool
    cls = pool.connection_class
    kw: dict[str, Any] = pool.connection_kwargs
    if cls not in (Connection, UnixDomainSocketConnection) or kw.get("credential_provider"):
        return None
    if int(kw.get("protocol") or 2) != 2:
        return None  # RESP3 push frames differ; redis-py handles them
    if kw.get("decode_responses"):
        return None  # the lean paths hand on bytes, as the backend's client gives them
    return LeanParams(host=str(kw.get("host") or "localhost"), port=int(kw.get("port") or 6379),
                      path=kw.get("path") if cls is UnixDomainSocketConnection else None,
                      username=kw.get("username"), password=kw.get("password"),
                      connect_timeout=float(kw.get("socket_connect_timeout") or 5.0),
                      db=int(kw.get("db") or 0))


def command(*args: str | bytes) -> bytes:
    """One RESP command."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class NotesConnection(asyncio.Protocol):
    """See the module docstring."""

    def __init__(self, on_note: Callable[[bytes], None]) -> None:
        self._on_note = on_note
        self._reader = hiredis.Reader()
        loop = asyncio.get_running_loop()
        self._replies: deque[asyncio.Future[Any]] = deque()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            if isinstance(reply, list) and len(reply) == 3 and reply[0] == b"message":
                if isinstance(reply[2], bytes):
                    self._on_note(reply[2])
            elif self._replies:
                waiter = self._replies.popleft()
                if waiter.done():
                    continue
                if isinstance(reply, hiredis.ReplyError):
                    waiter.set_exception(ConnectionError(f"redis: {reply}"))
                else:
                    waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        for waiter in self._replies:
            if not waiter.done():
                waiter.set_exception(ConnectionError("redis: notes connection lost"))
        if not self.closed.done():
            self.closed.set_result(None)

    async def call(self, *args: str | bytes) -> Any:
        """Send one command and wait for its reply (the handshake only)."""
        assert self._transport is not None
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._replies.append(waiter)
        self._transport.write(command(*args))
        return await waiter

    def close(self) -> None:
        """Close the connection."""
        if self._transport is not None:
            self._transport.close()


async def authenticate(call: Callable[..., Awaitable[Any]], params: LeanParams) -> None:
    """``AUTH`` on a new connection when ``params`` hold a password (``call`` sends one
    command and returns its reply)."""
    if params.password is None:
        return
    if params.username:
        await call("AUTH", params.username, params.password)
    else:
        await call("AUTH", params.password)


async def connect(params: LeanParams, protocol: Callable[[], P]) -> P:
    """A new connection to ``params``' server (unix socket or TCP) speaking ``protocol``."""
    loop = asyncio.get_running_loop()
    if params.path is not None:
        _, conn = await loop.create_unix_connection(protocol, params.path)
    else:
        _, conn = await loop.create_connection(protocol, params.host, params.port)
    return conn


async def open_notes(params: LeanParams, channel: str,
                     on_note: Callable[[bytes], None]) -> NotesConnection:
    """A connection subscribed to ``channel`` (confirmed); raises ``OSError``,
    ``ConnectionError`` or ``TimeoutError``."""
    async with asyncio.timeout(params.connect_timeout):
        conn = await connect(params, lambda: NotesConnection(on_note))
        try:
            await authenticate(conn.call, params)
            await conn.call("SUBSCRIBE", channel)
        except BaseException:
            conn.close()
            raise
    return conn
