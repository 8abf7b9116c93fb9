"""One live session with one MCP server (the official SDK's client), reconnected on demand.

The SDK's transports and ``ClientSession`` are anyio context managers that must be entered
and left by one task, so each connection is owned by a task of its own (``_own``): it
connects, initializes, lists the tools, then waits, pinging the server while calls are in
flight and listing the tools again on ``notifications/tools/list_changed``. Calls are made
from the runs' tool tasks through the session it holds::

    call ─▶ session (live? else reconnect, once for all waiting callers) ─▶ tools/call
         ◀─ result │ McpError │ link lost (the owner ended: server gone, ping failed)

A server that dies mid-call loses the link: the call ends at once with ``McpUnavailable``
(an ``is_error`` result for the model), and the next call connects again (the tools are
listed again on every connect). A cancelled call (the run's cancel, the call's timeout)
sends ``notifications/cancelled`` for its request before it unwinds.

Exceptions::

    RuntimeError
     └── McpUnavailable   no session: the server cannot be reached, or the link was lost
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.shared.session import ProgressFnT
from mcp.types import CONNECTION_CLOSED

from tool_registry.mcp.config import McpServerConfig, expand

log = logging.getLogger(__name__)

CLIENT_INFO = types.Implementation(name="agentloop", version="1")
CONNECT_TIMEOUT = 15.0
"""Seconds a connect (transport, ``initialize``, the first ``tools/list``) may take."""
PING_EVERY = 1.0
"""While calls are in flight, the owner pings this often: a server that died without closing
the stream is noticed in about this long rather than at the call's timeout."""
PING_TIMEOUT = 5.0
CANCEL_TIMEOUT = 2.0
"""Seconds spent sending ``notifications/cancelled`` for a cancelled call."""
OnTools = Callable[[list[types.Tool]], None]
Streams = tuple[Any, Any]
SESSION_TERMINATED = 32600
"""The error the SDK's streamable HTTP client reports for a 404 on its session (sic: not
the negative JSON-RPC code)."""


class McpUnavailable(RuntimeError):
    """No session with the server (it cannot be reached, or the link was lost mid-call)."""


class _SessionGone(Exception):
    """The server answered 404 for the session: it restarted and forgot it."""


@dataclass(slots=True)
class _Link:
    """One connect of the connection: ready once usable (or failed), lost once over."""

    ready: asyncio.Event = field(default_factory=asyncio.Event)
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    session: ClientSession | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = None
    broken: bool = False
    """A call saw the session closed under it: the owner ends the link."""


class McpConnection:
    """A session with the server ``config`` names; ``on_tools`` gets each listing. ``env``
    fills in ``${VAR}`` in header and environment values; None takes them literally (a
    run's own servers: the process's variables are not theirs to read). ``http_transport``
    makes the transport of each connect's HTTP client (streamable HTTP; a guarded one for a
    run's own servers)."""

    def __init__(self, config: McpServerConfig, *, env: Mapping[str, str] | None,
                 on_tools: OnTools | None = None,
                 http_transport: Callable[[], httpx.AsyncBaseTransport] | None = None) -> None:
        self.config = config
        self._http_transport = http_transport
        self.tools: list[types.Tool] = []
        self._env = env
        self._on_tools = on_tools
        self._link: _Link | None = None
        self._wake = asyncio.Event()
        self._stale = False
        self._pending = 0
        self._closing = False

    @property
    def connected(self) -> bool:
        """Whether a session is live now."""
        link = self._link
        return link is not None and link.session is not None and not link.lost.is_set()

    async def connect(self) -> None:
        """A live session (connecting if there is none); ``McpUnavailable`` otherwise."""
        await self._session()

    async def call(self, name: str, args: dict[str, Any],
                   progress: ProgressFnT | None = None) -> types.CallToolResult:
        """``tools/call``; ``McpError`` for a protocol error, ``McpUnavailable`` when the link
        is lost on the way. A cancel of the caller cancels the request at the server too.
        A session the server no longer knows (it restarted while idle) is replaced and the
        call sent again: the server never ran it."""
        try:
            return await self._call(name, args, progress)
        except _SessionGone:
            return await self._call(name, args, progress)

    async def _call(self, name: str, args: dict[str, Any],
                    progress: ProgressFnT | None) -> types.CallToolResult:
        session, link = await self._session()
        request_id = session._request_id  # the SDK numbers requests in order: this call's id
        call = asyncio.ensure_future(session.call_tool(name, args, progress_callback=progress))
        lost = asyncio.ensure_future(link.lost.wait())
        self._pending += 1
        self._wake.set()
        try:
            await asyncio.wait((call, lost), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            call.cancel()
            await asyncio.shield(self._cancel_remote(session, request_id))
            raise
        finally:
            self._pending -= 1
            lost.cancel()
        if call.done():
            return self._outcome(call, link)
        call.cancel()
        raise McpUnavailable(f"lost the connection to MCP server {self.config.name!r} "
                             f"during the call{_why(link)}")

    def _outcome(self, call: asyncio.Future[types.CallToolResult],
                 link: _Link) -> types.CallToolResult:
        try:
            return call.result()
        except McpError as exc:
            if exc.error.code == SESSION_TERMINATED:
                link.broken = True
                self._wake.set()
                raise _SessionGone from exc
            if exc.error.code == CONNECTION_CLOSED:  # the stream ended: so does the link
                link.broken = True
                self._wake.set()
                raise McpUnavailable(f"lost the connection to MCP server "
                                     f"{self.config.name!r} during the call") from exc
            raise

    async def close(self) -> None:
        """End the session (and a stdio server's process)."""
        self._closing = True
        self._wake.set()
        link = self._link
        if link is not None and link.task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(link.task), CANCEL_TIMEOUT + 3)
            except TimeoutError:
                link.task.cancel()
                await asyncio.gather(link.task, return_exceptions=True)

    async def _session(self) -> tuple[ClientSession, _Link]:
        link = self._link
        if link is None or link.lost.is_set() or link.broken:
            if self._closing:
                raise McpUnavailable(f"MCP server {self.config.name!r}: the service is stopping")
            link = self._link = _Link()
            link.task = asyncio.create_task(self._own(link), name=f"mcp-{self.config.name}")
        await link.ready.wait()
        if link.session is None or link.lost.is_set():
            raise McpUnavailable(f"cannot reach MCP server {self.config.name!r}{_why(link)}")
        return link.session, link

    async def _own(self, link: _Link) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(
                    read, write, message_handler=self._on_message, client_info=CLIENT_INFO))
                with anyio.fail_after(CONNECT_TIMEOUT):
                    await session.initialize()
                    await self._list(session)
                link.session = session
                link.ready.set()
                log.info("MCP server %s connected (%d tools)", self.config.name,
                         len(self.tools))
                await self._watch(session, link)
        except Exception as exc:  # the server is gone or never came: the link is lost
            link.error = _text(exc)
            log.warning("MCP server %s: %s", self.config.name, link.error)
        finally:
            link.session = None
            link.lost.set()
            link.ready.set()

    async def _watch(self, session: ClientSession, link: _Link) -> None:
        while not self._closing and not link.broken:
            self._wake.clear()
            with anyio.move_on_after(PING_EVERY if self._pending else None) as idle:
                await self._wake.wait()
            if idle.cancelled_caught:
                with anyio.fail_after(PING_TIMEOUT):
                    await session.send_ping()
            if self._stale:
                self._stale = False
                await self._list(session)

    async def _list(self, session: ClientSession) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
            tools += page.tools
            cursor = page.nextCursor
            if not cursor:
                break
        self.tools = [t for t in tools if self.config.offers(t.name)]
        if self._on_tools is not None:
            self._on_tools(list(self.tools))

    async def _on_message(self, message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(root, types.ToolListChangedNotification):
            self._stale = True
            self._wake.set()

    async def _cancel_remote(self, session: ClientSession, request_id: int) -> None:
        note = types.ClientNotification(types.CancelledNotification(
            params=types.CancelledNotificationParams(requestId=request_id,
                                                     reason="cancelled by the caller")))
        try:
            with anyio.fail_after(CANCEL_TIMEOUT):
                await session.send_notification(note)
        except Exception as exc:  # the link is gone: nothing left to cancel
            log.debug("MCP server %s: cancellation not sent: %s", self.config.name, exc)

    def _filled(self, values: dict[str, str]) -> dict[str, str]:
        return dict(values) if self._env is None else expand(values, self._env)

    def _transport(self) -> AbstractAsyncContextManager[Streams]:
        cfg = self.config
        if cfg.kind == "stdio":
            assert cfg.command
            env = {**get_default_environment(), **self._filled(cfg.env)}
            params = StdioServerParameters(command=cfg.command[0], args=cfg.command[1:],
                                           env=env)
            return _streams(stdio_client(params, errlog=sys.stderr))
        assert cfg.url
        headers = self._filled(cfg.headers)
        if cfg.kind == "sse":
            return _streams(sse_client(cfg.url, headers=headers, timeout=CONNECT_TIMEOUT))
        transport = self._http_transport() if self._http_transport is not None else None
        return _http(cfg.url, headers, transport)


@asynccontextmanager
async def _streams(transport: AbstractAsyncContextManager[Any]) -> AsyncIterator[Streams]:
    async with transport as streams:
        yield streams[0], streams[1]


@asynccontextmanager
async def _http(url: str, headers: dict[str, str],
                transport: httpx.AsyncBaseTransport | None) -> AsyncIterator[Streams]:
    timeout = httpx.Timeout(CONNECT_TIMEOUT, read=300.0)
    async with (httpx.AsyncClient(headers=headers, timeout=timeout, trust_env=False,
                                  transport=transport) as client,
                streamable_http_client(url, http_client=client) as (read, write, _)):
        yield read, write


def _why(link: _Link) -> str:
    return f": {link.error}" if link.error else ""


def _text(exc: BaseException) -> str:
    """One line for an exception, the first leaf of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, McpError):
        return exc.error.message
    return " ".join(str(exc).split()) or type(exc).__name__

