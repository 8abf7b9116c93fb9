"""Script calls on the lean connection (``redis_lean_scripts.LeanScripts``): one write per tick,
each call its own result or error, and redis-py's failure behaviour (one retry, then its
``ConnectionError``/``TimeoutError``) against a real redis-server and against servers that
misbehave on purpose."""

from __future__ import annotations

import asyncio
import time
from enum import StrEnum
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.engine.events import RunCreated
from app.store.errors import FencedOut
from app.store.redis import core as redis_module
from app.store.redis import lean_scripts as redis_lean_scripts
from app.store.redis.backend import RedisBackend
from app.store.redis.lean_scripts import LeanScripts, evalsha
from app.store.redis.notes_reader import LeanParams, lean_params
from tests.backends.helpers import batch, created_and_claimed, record

ECHO = "if ARGV[1] == 'fail' then return redis.error_reply('FENCED') end return ARGV[1]"
GET = "return redis.call('GET', KEYS[1])"


@pytest.fixture
def client(redis_client: Redis) -> Redis:
    return redis_client


def _lean(client: Redis, timeout: float = 5.0) -> LeanScripts:
    params = lean_params(client)
    assert params is not None
    return LeanScripts(client, params, timeout=timeout)


def _count_writes(scripts: LeanScripts) -> list[int]:
    """A one-item list counting the writes on ``scripts``' current connection from now on."""
    conn = scripts._conn
    assert conn is not None
    writes = [0]
    real_send = conn.send

    def counting_send(*args: Any) -> None:
        writes[0] += 1
        real_send(*args)

    conn.send = counting_send  # type: ignore[method-assign]
    return writes


class _Kind(StrEnum):
    STEER = "steer"


def test_commands_are_written_as_redis_py_packs_them() -> None:
    conn = Connection()
    long = "y" * (redis_lean_scripts.CACHED_LEN + 1)
    args = ["k1", b"k2", "x\u00e9", b"\x00\xff", 42, -7, 1.5, 0.1, "", 0, 1, "1", long,
            _Kind.STEER, memoryview(b"mv"), 10**30]
    theirs = b"".join(conn.pack_command("EVALSHA", "abc123", 2, *args))
    for _ in range(2):  # the second time from the kept blocks
        assert evalsha("abc123", args[:2], args[2:]) == theirs
    assert long not in redis_lean_scripts._BLOCKS  # long strings are not kept
    with pytest.raises(DataError):
        evalsha("abc123", ["k"], [True])
    with pytest.raises(DataError):
        evalsha("abc123", ["k"], [False])  # not mistaken for a kept 0


def test_the_kept_blocks_start_over_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_lean_scripts, "MAX_BLOCKS", 3)
    monkeypatch.setattr(redis_lean_scripts, "_BLOCKS", {})
    for n in range(10):
        assert evalsha("s", [f"key{n}"], [n]) == b"".join(
            Connection().pack_command("EVALSHA", "s", 1, f"key{n}", n))
        assert len(redis_lean_scripts._BLOCKS) <= 3


async def test_a_tick_is_one_write_and_errors_stay_with_their_call(client: Redis) -> None:
    script = client.register_script(ECHO)
    scripts = _lean(client)
    await client.script_flush()  # the first calls meet NOSCRIPT: the script object loads it
    before = (await client.info("commandstats")).get("cmdstat_evalsha", {"calls": 0})["calls"]
    calls = [scripts.call(script, ["k"], [str(n)]) for n in range(20)]
    calls.insert(5, scripts.call(script, ["k"], ["fail"]))
    calls.insert(9, scripts.call(script, ["k"], [True]))  # cannot be sent: only it fails
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[5], ResponseError) and "FENCED" in str(results[5])
    assert isinstance(results[9], DataError)
    assert [r for i, r in enumerate(results) if i not in (5, 9)] == [
        str(n).encode() for n in range(20)]
    assert (await client.info("commandstats"))["cmdstat_evalsha"]["calls"] - before >= 21

    writes = _count_writes(scripts)
    assert await asyncio.gather(*(scripts.call(script, ["k"], [str(n)]) for n in range(10))) \
        == [str(n).encode() for n in range(10)]
    assert writes == [1]  # ten calls of one tick: one write, replies matched in order
    await scripts.close()
    with pytest.raises(RedisConnectionError):
        await scripts.call(script, ["k"], ["late"])


async def test_the_url_database_and_a_cancelled_caller(redis_server_url: str) -> None:
    url = redis_server_url.rsplit("/", 1)[0] + "/5"
    client = Redis.from_url(url)
    try:
        await client.set("lean:key", "in db 5")
        params = lean_params(client)
        assert params is not None and params.db == 5
        scripts = LeanScripts(client, params, timeout=5.0)
        script = client.register_script(GET)
        echo = client.register_script(ECHO)
        await scripts.call(echo, ["k"], ["warm"])
        first = asyncio.ensure_future(scripts.call(echo, ["k"], ["a"]))
        second = asyncio.ensure_future(scripts.call(script, ["lean:key"], []))
        await asyncio.sleep(0)
        first.cancel()  # its reply still comes and is dropped; the next reply is the GET's
        assert await second == b"in db 5"
        await scripts.close()
    finally:
        await client.delete("lean:key")
        await client.aclose()


async def test_a_killed_connection_is_replaced_without_the_caller_noticing(
        client: Redis) -> None:
    script = client.register_script(ECHO)
    scripts = _lean(client)
    assert await scripts.call(script, ["k"], ["one"]) == b"one"
    conn = scripts._conn
    assert conn is not None and conn.transport is not None
    host, port = conn.transport.get_extra_info("sockname")[:2]
    assert await client.client_kill(f"{host}:{port}")
    results = await asyncio.gather(*(scripts.call(script, ["k"], [str(n)]) for n in range(5)))
    assert results == [str(n).encode() for n in range(5)]
    assert scripts._conn is not conn
    await scripts.close()


async def test_calls_made_while_a_write_is_out_go_together_after_its_replies(
        client: Redis) -> None:
    """While a write is out, lingering calls (event batches) of later ticks wait for its
    replies and then go out in one write (fewer, larger writes when busy); an urgent call
    (a request's) goes out at once, and Redis answers it after the write out. A BLPOP holds the
    write out; a connection lost meanwhile sends the calls waiting behind it on the next one."""
    script = client.register_script(ECHO)
    scripts = _lean(client)
    try:
        await _while_a_write_is_out(client, scripts, script)
    finally:  # a failed assertion must not leave a connection to the loop's close
        await scripts.close()


async def _while_a_write_is_out(client: Redis, scripts: LeanScripts, script: Any) -> None:
    await client.delete("lean:list")
    assert await scripts.call(script, ["k"], ["warm"]) == b"warm"
    writes = _count_writes(scripts)
    blocked = scripts.call_soon(None, [], [], (("BLPOP", "lean:list", "10"),))
    later = []
    for n in range(5):  # five ticks, each with a batch
        await asyncio.sleep(0)
        later.append(scripts.call_soon(script, ["k"], [str(n)], linger=True))
    await asyncio.sleep(0.05)
    assert writes == [1] and not any(f.done() for f in later)
    await client.rpush("lean:list", "x")
    assert await asyncio.gather(*later) == [str(n).encode() for n in range(5)]
    assert await blocked == [[b"lean:list", b"x"]]
    assert writes == [2]  # the BLPOP's, then the five together

    blocked = scripts.call_soon(None, [], [], (("BLPOP", "lean:list", "10"),))
    await asyncio.sleep(0)
    waiting = scripts.call_soon(script, ["k"], ["batch"], linger=True)
    await asyncio.sleep(0)
    urgent = scripts.call_soon(script, ["k"], ["urgent"])
    await asyncio.sleep(0.05)
    assert writes == [4]  # the urgent call went at once, the batch with it
    assert not urgent.done() and not waiting.done()  # answered in order: after the BLPOP
    await client.rpush("lean:list", "y")
    assert await asyncio.wait_for(blocked, 10) == [[b"lean:list", b"y"]]
    assert await asyncio.wait_for(asyncio.gather(waiting, urgent), 10) == [b"batch", b"urgent"]

    blocked = scripts.call_soon(None, [], [], (("BLPOP", "lean:list", "10"),))
    await asyncio.sleep(0)
    queued = scripts.call_soon(script, ["k"], ["queued"], linger=True)
    await asyncio.sleep(0.05)
    conn = scripts._conn
    assert conn is not None and conn.transport is not None and not queued.done()
    host, port = conn.transport.get_extra_info("sockname")[:2]
    assert await client.client_kill(f"{host}:{port}")
    assert await asyncio.wait_for(queued, 10) == b"queued"
    await client.rpush("lean:list", "z")  # the BLPOP, sent again on the new connection
    assert await asyncio.wait_for(blocked, 10) == [[b"lean:list", b"z"]]


async def _server(handle: str) -> tuple[asyncio.Server, int, list[int]]:
    """A loopback server that reads and never answers (``silent``) or closes at the first
    command (``closing``); the list counts connections."""
    opened: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(1)
        try:
            if handle == "closing":
                await reader.read(1)
                writer.close()
                return
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], opened


@pytest.mark.parametrize("handle", ["silent", "closing"])
async def test_a_server_that_never_answers_fails_the_call_after_one_retry(
        client: Redis, handle: str) -> None:
    server, port, opened = await _server(handle)
    params = LeanParams(host="127.0.0.1", port=port, path=None, username=None, password=None,
                        connect_timeout=1.0)
    scripts = LeanScripts(client, params, timeout=0.3)
    script = client.register_script(ECHO)
    started = time.monotonic()
    with pytest.raises(RedisTimeoutError if handle == "silent" else RedisConnectionError):
        async with asyncio.timeout(30):
            await scripts.call(script, ["k"], ["x"])
    took = time.monotonic() - started
    assert len(opened) == 2  # sent once more on a new connection, as redis-py retries once
    if handle == "silent":
        assert took >= 0.6  # two full reply timeouts, not a hang and not at once
    await scripts.close()
    server.close()
    await server.wait_closed()


async def test_nothing_listening_is_a_connection_error(client: Redis) -> None:
    params = LeanParams(host="127.0.0.1", port=1, path=None, username=None, password=None,
                        connect_timeout=1.0)
    scripts = LeanScripts(client, params, timeout=1.0)
    with pytest.raises(RedisConnectionError):
        async with asyncio.timeout(30):
            await scripts.call(client.register_script(ECHO), ["k"], ["x"])
    await scripts.close()


async def test_the_backend_takes_the_lean_path_on_a_plain_url(
        redis_backend: RedisBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(redis_backend._pipeline, LeanScripts)

    def no_redis_py(*args: object, **kwargs: object) -> None:
        raise AssertionError("a per-run command went through redis-py's pool")

    # what every run does outside its scripts: created, its record and events read, its
    # cancel flag checked, its job dropped; all of it on the lean connection
    monkeypatch.setattr(redis_backend.client, "execute_command", no_redis_py)
    monkeypatch.setattr(redis_backend.client, "pipeline", no_redis_py)
    rec, created = await redis_backend.create_run(record(), first_event=RunCreated(model="m"))
    assert created
    got, events = await redis_backend.get_run_and_events(rec.id, 0, 10)
    assert got is not None and got.id == rec.id and [e.type for e in events] == ["run_created"]
    assert (await redis_backend.get_run(rec.id)) == got
    assert [e.seq for e in await redis_backend.read_events(rec.id, 0)] == [1]
    assert await redis_backend.cancel_requested(rec.id) is False
    await redis_backend._drop_job(b"0-1")
    assert await redis_backend.get_run("run_missing") is None


async def test_a_run_s_batches_do_not_fill_the_kept_blocks(redis_backend: RedisBackend) -> None:
    """Each batch's token is new: kept, it would push a run's keys out of ``_BLOCKS`` every
    ``MAX_BLOCKS`` batches of the process. Only what repeats (keys, note, counts) is kept."""
    claim = await created_and_claimed(redis_backend)
    await redis_backend.append_events(claim.run_id, claim.attempt, batch("warm", token="w:0"))
    kept = len(redis_lean_scripts._BLOCKS)
    for n in range(1, 200):
        await redis_backend.append_events(claim.run_id, claim.attempt,
                                          batch(f"t{n}", token=f"{claim.attempt}:{n}"))
    assert len(redis_lean_scripts._BLOCKS) - kept < 5  # at most the counts not seen before
    assert [e.seq for e in await redis_backend.read_events(claim.run_id, 0)][-1] == 200


async def test_plain_commands_share_the_tick_with_script_calls(client: Redis) -> None:
    await client.hset("lean:h", mapping={"a": "1", "b": "2"})
    await client.xadd("lean:s", {"t": "x"}, id="1-0")
    await client.set("lean:text", "not a number")
    script = client.register_script(ECHO)
    scripts = _lean(client)
    await scripts.call(script, ["k"], ["warm"])
    writes = _count_writes(scripts)
    results = await asyncio.gather(
        scripts.call(script, ["k"], ["before"]),
        scripts.commands(("HGETALL", "lean:h"), ("XRANGE", "lean:s", "-", "+"),
                         ("HGET", "lean:h", "missing")),
        scripts.commands(("INCR", "lean:text"), ("GET", "lean:text")),
        scripts.call(script, ["k"], ["after"]),
        return_exceptions=True)
    assert writes == [1]
    assert results[0] == b"before" and results[3] == b"after"
    # RESP2 as hiredis reads it: HGETALL a flat list, XRANGE [id, [field, value…]], nil None
    assert results[1] == [[b"a", b"1", b"b", b"2"], [[b"1-0", [b"t", b"x"]]], None]
    # an error reply fails its batch (as a redis-py pipeline raises), after every reply came
    assert isinstance(results[2], ResponseError) and "not an integer" in str(results[2])
    assert await scripts.commands(("GET", "lean:text")) == [b"not a number"]
    assert await scripts.commands() == []
    await scripts.close()
    await client.delete("lean:h", "lean:s", "lean:text")


async def test_a_batch_cut_off_midway_is_sent_again_whole(client: Redis) -> None:
    """The first connection answers one of the batch's two commands and closes; the batch
    goes out again and its caller gets the second connection's two replies, not a mix."""
    connections = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            if await reader.read(65536):
                writer.write(b":1\r\n" if connections == 1 else b":2\r\n:3\r\n")
                await writer.drain()
            if connections == 1:
                return
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    params = LeanParams(host="127.0.0.1", port=port, path=None, username=None, password=None,
                        connect_timeout=1.0)
    scripts = LeanScripts(client, params, timeout=5.0)
    async with asyncio.timeout(30):
        assert await scripts.commands(("INCR", "a"), ("INCR", "b")) == [2, 3]
    assert connections == 2
    await scripts.close()
    server.close()
    await server.wait_closed()


async def test_a_user_and_password_in_the_url_authenticate(client: Redis,
                                                           redis_url: str) -> None:
    await client.acl_setuser("lean-user", enabled=True, passwords=["+s3cret"], keys=["*"],
                             channels=["*"], commands=["+@all"])
    host_part = redis_url.split("://", 1)[1]
    try:
        for password, ok in (("s3cret", True), ("wrong", False)):
            user = Redis.from_url(f"redis://lean-user:{password}@{host_part}")
            scripts = _lean(user)
            script = user.register_script(ECHO)
            if ok:
                assert await scripts.call(script, ["k"], ["in"]) == b"in"
            else:
                with pytest.raises(RedisConnectionError):  # AuthenticationError is one
                    await scripts.call(script, ["k"], ["in"])
            await scripts.close()
            await user.aclose()
    finally:
        await client.acl_deluser("lean-user")


async def test_append_soon_answers_through_its_callback(redis_backend: RedisBackend) -> None:
    """The sink's in-place write (``append_soon``): the new last seq, or the backend's own
    exception (FENCED → ``FencedOut``), handed to ``done`` before the future settles."""
    claim = await created_and_claimed(redis_backend)
    answers: list[tuple[int, BaseException | None]] = []
    future = redis_backend.append_soon(claim.run_id, claim.attempt, batch("a", "b"),
                                       lambda seq, error: answers.append((seq, error)))
    assert future is not None
    await asyncio.wait([future])  # waited on, never read: the answer is the callback's
    assert answers == [(2, None)]
    stale = redis_backend.append_soon(claim.run_id, claim.attempt - 1, batch("c"),
                                      lambda seq, error: answers.append((seq, error)))
    assert stale is not None
    await asyncio.wait([stale])
    assert answers[1][0] == 0 and isinstance(answers[1][1], FencedOut)
    assert [e.seq for e in await redis_backend.read_events(claim.run_id, 0)] == [1, 2]


async def test_runs_written_in_turn_keep_their_own_keys(redis_backend: RedisBackend,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's APPEND keys are kept between batches; with room for one run only, two runs
    written in turn each still land in their own log."""
    monkeypatch.setattr(redis_module, "MAX_APPEND_TO", 1)
    first = await created_and_claimed(redis_backend)
    second = await created_and_claimed(redis_backend)
    for n in range(3):
        for claim in (first, second):
            await redis_backend.append_events(claim.run_id, claim.attempt,
                                              batch(f"{claim.run_id}-{n}"))
    for claim in (first, second):
        events = await redis_backend.read_events(claim.run_id, 0)
        assert [e.seq for e in events] == [1, 2, 3]
        assert all(claim.run_id.encode() in e.data for e in events)
    assert len(redis_backend._append_to) <= 1


async def test_lingering_calls_wait_for_the_window_unless_a_call_takes_them_along(
        client: Redis) -> None:
    """With a window, the sink's event batches (``linger``) share one write: they go out once
    the last write is ``window`` old, at once after a quiet spell, and at once with any call
    that may not linger (a request's commands, a service event). Close fails those still
    lingering. Windows of 30 s show "taken along" without timing anything close."""
    script = client.register_script(ECHO)
    params = lean_params(client)
    assert params is not None
    short = LeanScripts(client, params, timeout=5.0, window=0.2)
    long = LeanScripts(client, params, timeout=5.0, window=30.0)
    try:
        await _linger_in(short, long, script)
    finally:  # a failed assertion must not leave a connection to the loop's close
        await short.close()
        await long.close()


async def _linger_in(short: LeanScripts, long: LeanScripts, script: Any) -> None:
    assert await short.call(script, ["k"], ["warm"]) == b"warm"  # a write, not lingering
    written = short._last_write
    writes = _count_writes(short)
    lingering = []
    for n in range(5):  # five ticks, each with a batch
        await asyncio.sleep(0)
        lingering.append(short.call_soon(script, ["k"], [str(n)], linger=True))
    assert await asyncio.gather(*lingering) == [str(n).encode() for n in range(5)]
    # uvloop's clock and timers count whole milliseconds: the timer may fire up to 1 ms early
    assert asyncio.get_running_loop().time() >= written + 0.2 - 0.002
    assert writes == [1]  # the five together, once the window had passed

    # nothing written for a window (here: ever): the first batch goes out at once
    first = long.call_soon(script, ["k"], ["first"], linger=True)
    assert await asyncio.wait_for(first, 10) == b"first"
    writes = _count_writes(long)
    waiting = [long.call_soon(script, ["k"], [f"w{n}"], linger=True) for n in range(3)]
    await asyncio.sleep(0)
    assert await long.commands(("PING",)) == [b"PONG"]  # a request's commands: at once
    assert [await asyncio.wait_for(w, 10) for w in waiting] == [b"w0", b"w1", b"w2"]
    assert writes == [1]  # the batches went out with the PING, in the same write
    assert await asyncio.wait_for(long.call(script, ["k"], ["urgent"]), 10) == b"urgent"
    left = long.call_soon(script, ["k"], ["left"], linger=True)
    await asyncio.sleep(0)
    assert not left.done()  # the window since the last write has not passed
    await long.close()
    with pytest.raises(RedisConnectionError):
        await left


async def test_the_service_lets_event_batches_wait_for_the_flush_interval(
        redis_url: str) -> None:
    """``AGENTLOOP_EVENT_FLUSH_MS`` is the window of the backend the service makes: a run's
    batch waits for it, a service event (a steer's ``message_queued``) does not and takes the
    batch along."""
    from app.config import Settings
    from app.engine.events import MessageQueued
    from app.process.setup import make_store

    backend = make_store(Settings(redis_url=redis_url, event_flush_ms=30_000))
    assert isinstance(backend, RedisBackend)
    assert isinstance(backend._pipeline, LeanScripts) and backend._pipeline._window == 30.0
    await backend.start()
    try:
        claim = await created_and_claimed(backend)
        writes = _count_writes(backend._pipeline)
        answers: list[tuple[int, BaseException | None]] = []
        backend.append_soon(claim.run_id, claim.attempt, batch("a"),
                            lambda seq, error: answers.append((seq, error)))
        assert answers == []  # only once Redis answered
        first = backend.append_soon(claim.run_id, claim.attempt, batch("b"),
                                    lambda seq, error: answers.append((seq, error)))
        assert first is not None
        await asyncio.sleep(0)
        assert not first.done()  # lingering: the window since the claim's write is 30 s
        seq = await asyncio.wait_for(backend.append_service_event(
            claim.run_id, MessageQueued(message_id="m1", kind="steer")), 10)
        assert seq == 3 and answers == [(1, None), (2, None)]
        assert writes == [1]  # both batches went out with the service event
    finally:
        await backend.close()
