"""Script calls on one plain connection of their own, without redis-py's per-command path.

A live run writes one event batch per model frame, so the backend's script calls are its
per-frame Redis cost. Through redis-py each call (a pipeline of one when the calls of a tick are
few) took ~6× the CPU of the same EVALSHA written by hand (``bench/redis_calls.py``: connection
checkout, command packing through the encoder, a task and a timeout scope per flush, the
parser's read loop). ``LeanScripts`` is ``ScriptPipeline`` with that path replaced: every call
of one event-loop tick goes out in one write, hiredis parses the replies in the protocol's
``data_received`` and each resolves its caller's future there::

    tick: call A, call B ─▶ one write: EVALSHA A, EVALSHA B ─▶ replies in order ─▶ A, B resolved
    tick: commands([HGETALL …], [XRANGE …]) ─▶ in the same write ─▶ one list of replies
    no connection yet ─▶ connect (AUTH, SELECT) once; calls made meanwhile go out after it
    connection lost / no reply in ``timeout`` s ─▶ each call in flight is sent once more on a
        new connection (redis-py's pipeline retries once too), then fails with redis-py's
        ``ConnectionError`` / ``TimeoutError``
    new connection ─▶ ``preload``'s scripts loaded first: a restarted Redis, which lost its
        scripts, meets no call before they are back
    NOSCRIPT (flushed by hand) ─▶ that call runs through the script object, which loads it;
        calls behind it in the same write are done before it
    lingering calls (``linger=True``: the sink's event batches) with ``window`` > 0 ─▶ they go
        out at once after a quiet spell, else once the last write is ``window`` old; any other
        call, or a window passed, takes them along at once
    a write out, its replies not all in ─▶ lingering calls wait for them and then go together;
        any other call goes at once (a POST waits one round trip, not two)

A live run's frames come ~33 ms apart, but a busy process writes for hundreds of runs: at 300
streams, ~9,000 batches a second. Each write costs a syscall here, a read and two writes in
redis-server (the reply, the note) and two reads here again, whatever it carries. The service
sets ``window`` to ``AGENTLOOP_EVENT_FLUSH_MS``: the most an event may wait to be batched.
Measured at 300 live streams (``bench/ab_live.py --redis --streams 300``, 6 rounds): window
2 ms, server CPU per frame 0.89x and with redis-server's 0.86x, lag p50 1.0 -> 2.3 ms (p99
unchanged). A process writing less often than once per window waits for nothing.

``commands`` sends plain commands the same way: what each run does besides its scripts (its
create, its record and first page of events per subscriber, its cancel flag, its job's
removal). Through redis-py each was a round trip of its own at redis-py's per-command cost, and
a burst of new runs opened a pool connection per concurrent request. Their replies are RESP2's
as hiredis reads them (``HGETALL`` a flat list, not redis-py's dict). Replies and errors are
those redis-py gives (its parser's error classes: ``ResponseError`` carries ``FENCED``,
``NOTFOUND``, … as before), so ``redis_errors.guard`` maps them alike. Used where the lean
notes reader is (``lean_params``: plain TCP or unix socket, RESP2, bytes replies, no
credential provider); anything else keeps ``ScriptPipeline`` and redis-py's commands.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import hiredis
from redis._parsers.base import BaseParser
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, InvalidResponse, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.store.redis.notes_reader import LeanParams, authenticate, command, connect
from app.store.redis.pipeline import settle

RETRY_AFTER = 0.02
"""Seconds before calls a lost connection failed are sent again (redis-py's backoff base)."""


@dataclass(slots=True, eq=False)
class _Call:
    """A script call (``script``), or plain ``commands`` sent together (``script`` None) whose
    replies are gathered in ``replies`` until each has one."""

    script: AsyncScript | None
    keys: list[Any]
    args: list[Any]
    future: asyncio.Future[Any]
    retried: bool = False
    commands: tuple[tuple[str | bytes, ...], ...] = ()
    replies: list[Any] = field(default_factory=list)

    def payload(self) -> bytes:
        """What is written for this call (``DataError``: its arguments cannot be sent)."""
        if self.script is not None:
            return evalsha(self.script.sha, self.keys, self.args)
        self.replies = []  # sent (again): the replies of an earlier send are void
        return b"".join(command(*c) for c in self.commands)

    def expects(self) -> int:
        """How many replies this call's payload gets."""
        return 1 if self.script is not None else len(self.commands)


def _arg(value: Any) -> bytes:
    """One argument as redis-py's encoder writes it (bytes, str, int, float; bool refused)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int) and not isinstance(value, bool):
        return b"%d" % value
    if isinstance(value, float):
        return repr(value).encode()
    if isinstance(value, memoryview):
        return value.tobytes()
    raise DataError(f"Invalid input of type: '{type(value).__name__}'. "
                    "Convert to a bytes, string, int or float first.")


_BLOCKS: dict[str | int, bytes] = {}
"""Short strings and ints as the RESP bulk strings they are written as: a run's keys, its
channel and note, event types and small counts come back in every batch it writes."""
MAX_BLOCKS = 10_000
"""Entries ``_BLOCKS`` holds before it starts over (a few MB at most)."""
CACHED_LEN = 100
"""Longer strings are encoded where they are written and not kept."""


def _block(value: Any) -> bytes:
    """``value`` as one RESP bulk string, kept in ``_BLOCKS`` when short (``_arg``'s types)."""
    item = _arg(value)
    block = b"$%d\r\n%s\r\n" % (len(item), item)
    if type(value) is int or (type(value) is str and len(value) <= CACHED_LEN):
        if len(_BLOCKS) >= MAX_BLOCKS:
            _BLOCKS.clear()
        _BLOCKS[value] = block
    return block


def evalsha(sha: str, keys: list[Any], args: list[Any]) -> bytes:
    """``EVALSHA sha numkeys keys… args…`` as one RESP command (written out here rather than
    through ``command``: this runs per event batch, and the general path costs ~30 % more).
    Short strings and ints come from ``_BLOCKS`` (a run's five keys, channel and note, the
    event types: 2.0 µs per batch instead of 6.8 measured with ``timeit`` here)."""
    get = _BLOCKS.get
    parts = [b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%s\r\n" % (len(keys) + len(args) + 3, len(sha),
                                                                 sha.encode()),
             get(len(keys)) or _block(len(keys))]
    add = parts.append
    for value in (*keys, *args):
        kind = type(value)
        if kind is bytes:
            add(b"$%d\r\n%s\r\n" % (len(value), value))
        elif kind is str or kind is int:  # exactly: a bool is refused, as redis-py does
            add(get(value) or _block(value))
        else:
            add(_block(value))
    return b"".join(parts)


class _Connection(asyncio.Protocol):
    """One connection: what was sent waits in ``sent`` (in order) for its reply."""

    def __init__(self, owner: LeanScripts) -> None:
        self._owner = owner
        self._reader = hiredis.Reader(protocolError=InvalidResponse,
                                      replyError=BaseParser.parse_error)
        self.transport: asyncio.Transport | None = None
        self.sent: deque[tuple[float, _Call | asyncio.Future[Any]]] = deque()
        self.timed_out = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        try:
            while (reply := self._reader.gets()) is not False:
                if not self.sent:
                    raise InvalidResponse("a reply nobody asked for")
                _, waiting = self.sent.popleft()
                self._owner.resolve(waiting, reply)
        except InvalidResponse as exc:
            self._owner.broken(self, RedisConnectionError(f"Protocol error: {exc}"))
            return
        if not self.sent:
            self._owner.drained()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        error: Exception = (RedisTimeoutError("Timeout reading from Redis") if self.timed_out
                            else RedisConnectionError("Connection closed by server."))
        self._owner.broken(self, error)

    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def send(self, payload: bytes, waiting: Sequence[_Call | asyncio.Future[Any]], now: float
             ) -> None:
        assert self.transport is not None
        self.sent.extend((now, w) for w in waiting)
        self.transport.write(payload)

    async def call(self, *args: str | bytes) -> Any:
        """One command and its reply (the handshake); an error reply is raised."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Any] = loop.create_future()
        self.send(command(*args), [waiter], loop.time())
        return await waiter


class LeanScripts:
    """See the module docstring (``ScriptPipeline``'s interface). ``timeout``: seconds a sent
    call may wait for its reply."""

    def __init__(self, client: Redis, params: LeanParams, *, timeout: float,
                 window: float = 0.0) -> None:
        self._client = client
        self._window = window
        self._last_write = -window
        self._linger: asyncio.TimerHandle | None = None
        self._urgent = False  # a call that may not linger is pending
        self._params = params
        self._pending: list[_Call] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._timeout = timeout
        self._conn: _Connection | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._held: list[_Call] = []  # waiting for the connection
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self.preload: list[AsyncScript] = []
        """Scripts loaded on each new connection, before any call goes out on it."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """Kept by ``_running``: ``asyncio.get_running_loop()`` costs a ``getpid`` syscall on
        Python 3.11, and a batch's write asked for it four times."""

    async def call(self, script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
        """Run ``script`` with ``keys``/``args`` in the next write; its result or error."""
        return await self.call_soon(script, keys, args)

    async def commands(self, *commands: tuple[str | bytes, ...]) -> list[Any]:
        """``commands`` in the next write, in order; their replies (RESP2, as hiredis reads
        them), or the first error reply once every command has answered (as a redis-py
        pipeline raises it). Lost connection: sent once more, as a whole."""
        if not commands:
            return []
        replies: list[Any] = await self.call_soon(None, [], [], commands)
        return replies

    def call_soon(self, script: AsyncScript | None, keys: list[Any], args: list[Any],
                  commands: tuple[tuple[str | bytes, ...], ...] = (), *,
                  linger: bool = False) -> asyncio.Future[Any]:
        """``call`` (or ``commands``) without a coroutine: the future its reply settles (the
        sink's in-place writes, ``RedisBackend.append_soon``). ``linger``: it may wait up to
        ``window`` for others to share its write."""
        loop = self._running()
        if self._closed:
            failed: asyncio.Future[Any] = loop.create_future()
            failed.set_exception(RedisConnectionError("the script connection is closed"))
            return failed
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append(_Call(script, keys, args, future, commands=commands))
        self._urgent = self._urgent or not linger
        if not self._scheduled and not self._lingering(loop):
            self._scheduled = True
            loop.call_soon(self._flush_soon)
        return future

    def _running(self) -> asyncio.AbstractEventLoop:
        """The running loop, looked up once (again only if the one kept was closed)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            loop = self._loop = asyncio.get_running_loop()
        return loop

    def _lingering(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether what is pending may wait for the window since the last write to pass (only
        lingering calls, the window not passed); if so, a timer sends it then."""
        due = self._last_write + self._window
        if self._urgent or loop.time() >= due:
            return False
        if self._linger is None:
            self._linger = loop.call_at(due, self._flush_lingering)
        return True

    def _flush_soon(self) -> None:
        self._scheduled = False
        self._flush()

    def _flush_lingering(self) -> None:
        self._linger = None
        self._flush()

    def _flush(self) -> None:
        """Everything pending in one write, unless a write is out and nothing pending is
        urgent (``drained`` sends them with its last reply). An urgent call (a request's, a
        claim's) does not wait for the replies to the write out: Redis answers a connection's
        commands in the order sent, so a second write out keeps every call's order."""
        conn = self._conn
        if conn is not None and conn.sent and conn.usable() and not self._urgent:
            return  # a write is out: these go with its last reply (``drained``), together
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        calls, self._pending = self._pending, []
        if calls:
            self._urgent = False
            self._last_write = self._running().time()
            self._send(calls)

    def drained(self) -> None:
        """Every reply is in: what was queued meanwhile goes out in one write (lingering
        calls alone once the window since the last write has passed)."""
        if self._pending and not self._lingering(self._running()):
            self._flush()

    def _send(self, calls: list[_Call]) -> None:
        calls = [c for c in calls if not c.future.done()]  # a caller cancelled: not sent
        if not calls:
            return
        if self._closed:
            self._fail(calls, RedisConnectionError("the script connection is closed"))
            return
        conn = self._conn
        if conn is None or not conn.usable():
            self._held.extend(calls)
            if self._connecting is None:
                self._connecting = asyncio.create_task(self._connect())
            return
        payloads, sending = [], []
        for c in calls:
            try:
                payloads.append(c.payload())
            except DataError as exc:  # this call's arguments cannot be sent: only it fails
                c.future.set_exception(exc)
                continue
            sending += [c] * c.expects()  # one entry per reply it gets
        if not sending:
            return
        loop = self._running()
        conn.send(b"".join(payloads), sending, loop.time())
        if self._timer is None:
            self._timer = loop.call_at(loop.time() + self._timeout, self._check_replies)

    async def _connect(self) -> None:
        params = self._params
        conn: _Connection | None = None
        ok = False
        try:
            async with asyncio.timeout(params.connect_timeout):
                conn = await connect(params, lambda: _Connection(self))
                await authenticate(conn.call, params)
                if params.db:
                    await conn.call("SELECT", str(params.db))
                await asyncio.gather(*(conn.call("SCRIPT", "LOAD", _arg(s.script))
                                       for s in self.preload))
            ok = True
        except Exception as exc:
            error = (RedisTimeoutError("Timeout connecting to Redis")
                     if isinstance(exc, TimeoutError) else exc
                     if isinstance(exc, RedisConnectionError | ResponseError)
                     else RedisConnectionError(f"Error connecting to Redis: {exc}"))
            held, self._held = self._held, []
            self._connecting = None
            self._retry_or_fail(held, error)
            return
        finally:
            if not ok and conn is not None and conn.transport is not None:
                conn.transport.close()  # failed or cancelled (closing) midway
        self._conn = conn
        self._connecting = None
        held, self._held = self._held, []
        self._send(held)

    def resolve(self, waiting: _Call | asyncio.Future[Any], reply: Any) -> None:
        """A reply came for ``waiting`` (called from ``data_received``)."""
        if isinstance(waiting, asyncio.Future):
            if not waiting.done():
                if isinstance(reply, Exception):
                    waiting.set_exception(reply)
                else:
                    waiting.set_result(reply)
            return
        future = waiting.future
        if waiting.script is None:  # plain commands: settled once each has its reply
            waiting.replies.append(reply)
            if len(waiting.replies) == len(waiting.commands) and not future.done():
                error = next((r for r in waiting.replies if isinstance(r, Exception)), None)
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(waiting.replies)
            return
        if future.done():
            return
        if isinstance(reply, NoScriptError):
            # through the script object, which loads the script Redis lacked
            task = asyncio.ensure_future(settle(future, waiting.script(
                keys=waiting.keys, args=waiting.args)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(reply, Exception):
            future.set_exception(reply)
        else:
            future.set_result(reply)

    def broken(self, conn: _Connection, error: Exception) -> None:
        """``conn`` failed: its calls in flight are sent again once, or fail with ``error``."""
        if conn.transport is not None:
            conn.transport.abort()
        if self._conn is conn:
            self._conn = None
        sent = list(dict.fromkeys(w for _, w in conn.sent))  # a call of N commands: N entries
        conn.sent.clear()
        if self._pending and not self._scheduled:  # queued behind that write: send them now
            self._scheduled = True
            self._running().call_soon(self._flush_soon)
        for waiting in sent:
            if isinstance(waiting, asyncio.Future) and not waiting.done():
                waiting.set_exception(error)
        self._retry_or_fail([w for w in sent if isinstance(w, _Call)], error)

    def _retry_or_fail(self, calls: list[_Call], error: Exception) -> None:
        again = [c for c in calls if not c.retried and not self._closed]
        for c in again:
            c.retried = True
        self._fail([c for c in calls if c not in again], error)
        if again:
            self._running().call_later(RETRY_AFTER, self._send, again)

    @staticmethod
    def _fail(calls: list[_Call], error: Exception) -> None:
        for c in calls:
            if not c.future.done():
                c.future.set_exception(error)

    def _check_replies(self) -> None:
        """The one reply timer: the oldest call still waiting past ``timeout`` ends the
        connection (its calls are retried or failed as for a lost connection)."""
        self._timer = None
        conn = self._conn
        if conn is None or not conn.sent:
            return
        loop = self._running()
        oldest = conn.sent[0][0]
        if loop.time() - oldest >= self._timeout:
            conn.timed_out = True
            self.broken(conn, RedisTimeoutError("Timeout reading from Redis"))
            return
        self._timer = loop.call_at(oldest + self._timeout, self._check_replies)

    async def close(self) -> None:
        """Fail what is still waiting, close the connection, wait for reloads under way."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        error = RedisConnectionError("the script connection is closed")
        self._fail(self._held + self._pending, error)
        self._held, self._pending = [], []
        conn, self._conn = self._conn, None
        if conn is not None:
            for _, waiting in conn.sent:
                future = waiting if isinstance(waiting, asyncio.Future) else waiting.future
                if not future.done():
                    future.set_exception(error)
            conn.sent.clear()
            if conn.transport is not None:
                conn.transport.close()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
