"""The Redis backend (redis.asyncio + hiredis): many processes, runs survive a worker crash.

Key layout in ``redis_keys``; every per-run write is one Lua script from ``redis_scripts``
(atomic, fenced by the run's attempt). Dispatch is the ``al:jobs`` stream read through the
``workers`` consumer group: a worker's pending entries are its runs. Liveness is one key per
worker (``al:worker:<name>``, PX lease) that its heartbeat renews, whatever number of runs it
holds; claiming workers look for holders whose key has lapsed and take their jobs::

    every min(0.5 s, lease/4): XPENDING summary ─ MGET the holders' liveness keys
      lapsed holder ─ XPENDING its jobs ─ XCLAIM (min idle lease/2: of two workers racing for
      a job only the first gets it) ─ CLAIM script (attempt + 1 fences the lost worker out)

On Redis Cluster (``cluster=True``) the same keys and scripts run through the cluster
client; ``redis_cluster`` adds the per-master script pipelines with ``WAIT`` and the notes
travel on per-run shard channels (``redis_notify_sharded``).

Fail fast: connecting times out after ``connect_timeout`` (0.5 s) with one retry, so the API
answers 503 within about a second; every Redis failure surfaces as ``BackendError``. Blocking
reads block at most 1 s, well under the 5 s socket timeout.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import orjson
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.engine.events import ServiceEvent
from app.store.contract import (
    BackendError,
    EventBatch,
    IdempotencyConflict,
    RunPage,
    RunRecord,
    ServiceEvents,
    StoredEvent,
    first_event_body,
)
from app.store.fresh_runs import FreshRuns
from app.store.memory.backend import make_cursor, matches, parse_cursor
from app.store.redis import keys
from app.store.redis import scripts as lua
from app.store.redis.cluster import ClusterScripts, NodeClients, cluster_client
from app.store.redis.dispatch import RedisDispatch
from app.store.redis.errors import guard, mapped
from app.store.redis.lean_scripts import LeanScripts
from app.store.redis.notes_reader import lean_params
from app.store.redis.notify import Notifier
from app.store.redis.notify_sharded import ShardedNotifier
from app.store.redis.parking import RedisParking
from app.store.redis.pipeline import ScriptCalls, ScriptPipeline
from app.store.redis.queues import RedisQueues
from app.store.redis.records import decode_record, encode_fields, encode_record
from app.store.redis.threads import RedisThreads

LEAN_SCRIPTS = True
"""Script calls through ``LeanScripts`` where the connection allows (tests compare both)."""
MAX_APPEND_TO = 10_000
"""Runs whose APPEND keys are kept (built from the run id per batch they cost ~2 µs)."""
P = ParamSpec("P")
T = TypeVar("T")




class RedisBackend(RedisQueues, RedisDispatch, RedisThreads, RedisParking, ServiceEvents):
    """See the module docstring. ``lease`` and ``run_ttl`` in seconds; ``max_connections``
    bounds the pool (callers wait up to ``socket_timeout`` for a free connection);
    ``client_name`` shows in CLIENT LIST (workers use their name); ``cluster``: ``url`` names
    seed nodes of a Redis Cluster (comma-separated)."""

    name = "redis"

    def __init__(self, url: str, *, lease: float = 5.0, run_ttl: float = 7 * 86400.0,
                 connect_timeout: float = 0.5, socket_timeout: float = 5.0,
                 max_connections: int = 256, client_name: str | None = None,
                 cluster: bool = False) -> None:
        self.lease = lease
        self.run_ttl = run_ttl
        self.client: Redis | RedisCluster
        self._nodes: NodeClients | None = None
        self._pipeline: ScriptCalls
        self._append_to: dict[str, tuple[tuple[str, ...], str, str]] = {}
        """run_id → its APPEND keys, channel and note (``_append_call``, per batch)."""
        self.notifier: Notifier
        if cluster:
            self.client = cluster_client(url, connect_timeout=connect_timeout,
                                         socket_timeout=socket_timeout,
                                         max_connections=max_connections,
                                         client_name=client_name)
            self._nodes = NodeClients(self.client)
            self._pipeline = ClusterScripts(self._nodes)
            self.notifier = ShardedNotifier(self._nodes, self.cancel_requested)
        else:
            pool = BlockingConnectionPool.from_url(
                url, max_connections=max_connections, timeout=socket_timeout,
                socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout,
                retry=Retry(ExponentialBackoff(cap=0.1, base=0.02), 1),
                retry_on_error=[RedisConnectionError, RedisTimeoutError],
                client_name=client_name)
            self.client = Redis(connection_pool=pool)
            lean = lean_params(self.client) if LEAN_SCRIPTS else None
            self._pipeline = (ScriptPipeline(self.client) if lean is None
                              else LeanScripts(self.client, lean, timeout=socket_timeout))
            self.notifier = Notifier(self.client, self.cancel_requested)
        self.feeds = self.notifier.feeds  # live SSE frames from the notes (app.delivery.tap)
        self.fresh_runs = FreshRuns()  # created here: a new stream's first page
        self._s = {name: self.client.register_script(getattr(lua, name)) for name in (
            "APPEND", "UPDATE", "CLAIM", "FINISH", "RELEASE_RUN", "ENQUEUE", "CLOSE_QUEUES",
            "WITHDRAW", "TAKE", "RELEASE", "CANCEL")}
        self._group_ready = False
        self._next_scan = 0.0

    async def _run(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        return await self._pipeline.call(self._s[name], keys_, args)

    async def _commands(self, *commands: tuple[str | bytes, ...]) -> list[Any]:
        """Plain commands in one round trip, in order (not a transaction); raises the first
        error reply. On the lean connection when the backend has one (with the tick's script
        calls), else a redis-py pipeline. Replies as either gives them: ``pairs`` and ``rows``
        read both shapes."""
        if isinstance(self._pipeline, LeanScripts):
            return await self._pipeline.commands(*commands)
        if len(commands) == 1:
            return [await self.client.execute_command(*commands[0])]
        async with self.client.pipeline(transaction=False) as pipe:
            for c in commands:
                pipe.execute_command(*c)
            replies: list[Any] = await pipe.execute()
        return replies

    @guard
    async def start(self) -> None:
        """Check the connection and create the job consumer group."""
        await self.client.ping()
        await self._ensure_group()

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            await self.client.xgroup_create(keys.JOBS_STREAM, keys.JOBS_GROUP, id="0",
                                            mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def close(self) -> None:
        """Stop the listener and close the pool."""
        await self.notifier.close()
        await self._pipeline.close()
        if self._nodes is not None:
            await self._nodes.close()
        if isinstance(self.client, RedisCluster):
            await self.client.aclose()
        else:
            await self.client.aclose(close_connection_pool=True)

    def _channel(self, run_id: str) -> str:
        """Where the run's notes go: its shard channel on a cluster, else the global one."""
        return keys.NOTIFY_CHANNEL if self._nodes is None else keys.notes_channel(run_id)

    async def ping(self) -> bool:
        """Whether Redis answers now (a cluster: whether any master does; one failing over
        makes only its slots unavailable, not the service)."""
        try:
            if self._nodes is not None:
                return await self._nodes.any_master_answers()
            return bool(await self.client.ping())
        except (RedisError, RedisClusterException, OSError):
            return False

    # -- runs --------------------------------------------------------------------------
    @guard
    async def create_run(self, record: RunRecord, *, idempotency_key: str | None = None,
                         request_hash: str | None = None,
                         first_event: ServiceEvent | None = None) -> tuple[RunRecord, bool]:
        """See ``Backend.create_run``."""
        if idempotency_key is not None:
            first = await self._idempotent(record, idempotency_key, request_hash or "")
            if first is not None:
                return first, False
        await self._ensure_group()
        run_writes: list[tuple[str | bytes, ...]] = []
        seq_1: StoredEvent | None = None
        if first_event is not None:
            record.last_seq = 1
            type_, data = first_event_body(record.id, first_event)
            seq_1 = StoredEvent(1, type_, data)
            run_writes.append(("XADD", keys.events_key(record.id), "1-0", "t", type_, "d", data))
        run_writes.append(("HSET", keys.run_key(record.id), *_flat(encode_record(record))))
        if self._nodes is not None:  # the run's slot, confirmed, strictly before its job
            def fill(pipe: Any) -> None:
                for command in run_writes:
                    pipe.execute_command(*command)

            await self._nodes.durable(keys.run_key(record.id), fill)
            await self.client.zadd(keys.tenant_runs_key(record.tenant),
                                   {record.id: record.created_at})
            await self._add_job(record.id)
        else:
            await self._commands(*run_writes,  # in order: the job last
                                 ("ZADD", keys.tenant_runs_key(record.tenant),
                                  repr(record.created_at), record.id),
                                 ("XADD", keys.JOBS_STREAM, "*", "run", record.id))
        if seq_1 is not None:
            self.fresh_runs.add(record.id, record.tenant, seq_1)
        return record, True

    async def _add_job(self, run_id: str) -> None:
        """A dispatch entry for the run (on a cluster: confirmed by a replica)."""
        if self._nodes is None:
            await self.client.xadd(keys.JOBS_STREAM, {"run": run_id})
        else:
            await self._nodes.durable(keys.JOBS_STREAM,
                                      lambda pipe: pipe.xadd(keys.JOBS_STREAM, {"run": run_id}))

    async def _idempotent(self, record: RunRecord, key: str, body_hash: str) -> RunRecord | None:
        name = keys.idempotency_key(record.tenant, key)
        value = f"{body_hash}|{record.id}"
        if await self.client.set(name, value, nx=True, ex=int(self.run_ttl) + 86400):
            return None
        raw: Any = await self.client.get(name)
        seen = (raw or b"").decode()
        seen_hash, _, run_id = seen.rpartition("|")
        if seen_hash != body_hash:
            raise IdempotencyConflict(key)
        for _ in range(50):  # the first request may still be writing its run
            first = await self.get_run(run_id)
            if first is not None:
                return first
            await asyncio.sleep(0.02)
        raise BackendError(f"idempotency key {key}: run {run_id} missing")

    @guard
    async def get_run(self, run_id: str) -> RunRecord | None:
        """See ``Backend.get_run``."""
        (raw,) = await self._commands(("HGETALL", keys.run_key(run_id)))
        return decode_record(pairs(raw))

    @guard
    async def list_runs(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                        limit: int, cursor: str | None) -> RunPage:
        """See ``Backend.list_runs``: walks the tenant's zset newest first, filtering."""
        zkey = keys.tenant_runs_key(tenant)
        after = parse_cursor(cursor)
        top: float | str = after[0] if after else "+inf"
        page: list[RunRecord] = []
        offset, chunk = 0, max(limit + 1, 50)
        while len(page) <= limit:
            rows: Any = await self.client.zrevrangebyscore(zkey, top, "-inf", start=offset,
                                                      num=chunk, withscores=True)
            if not rows:
                break
            offset += len(rows)
            for record in await self._records([r[0].decode() for r in rows], zkey):
                if after is not None and (record.created_at, record.id) >= after:
                    continue
                if matches(record, status, metadata) and len(page) <= limit:
                    page.append(record)
        more = len(page) > limit
        page = page[:limit]
        return RunPage(runs=page, next_cursor=make_cursor(page[-1]) if more else None)

    async def _records(self, run_ids: list[str], zkey: str) -> list[RunRecord]:
        async with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(keys.run_key(run_id))
            raw = await pipe.execute()
        records = [decode_record(r) for r in raw]
        gone = [i for i, r in zip(run_ids, records, strict=True) if r is None]
        if gone:  # expired runs leave their index entry behind
            await self.client.zrem(zkey, *gone)
        return [r for r in records if r is not None]

    @guard
    async def update_run(self, run_id: str, attempt: int, **fields: Any) -> None:
        """See ``Backend.update_run``."""
        pairs = [x for kv in encode_fields(fields).items() for x in kv]
        await self._run("UPDATE", [keys.run_key(run_id)], [attempt, *pairs])

    @guard
    async def expires_in(self, run_id: str) -> float | None:
        """Seconds until the run's keys expire (None: no TTL yet)."""
        ttl = await self.client.pttl(keys.run_key(run_id))
        return ttl / 1000 if ttl >= 0 else None

    # -- checkpoints and events -------------------------------------------------------
    @guard
    async def load_checkpoint(self, run_id: str) -> list[dict[str, Any]]:
        """See ``Backend.load_checkpoint``."""
        return [orjson.loads(m) for m in await self.client.lrange(keys.checkpoint_key(run_id),
                                                                  0, -1)]

    @guard
    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """See ``Backend.append_events``: one APPEND script (XADD ``<seq>-0`` per event)."""
        run_keys, args = self._append_call(run_id, attempt, batch)
        return int(await self._run("APPEND", run_keys, args))

    def append_soon(self, run_id: str, attempt: int | None, batch: EventBatch,
                    done: Callable[[int, BaseException | None], None]
                    ) -> asyncio.Future[Any] | None:
        """``append_events`` without a coroutine (``run_sink.AppendsSoon``), on the lean
        connection; None without one. ``done(last_seq, None)``, or ``done(0, error)`` with the
        backend's exception, once Redis answers; the future returned is settled right after (wait
        on it; its own result is the raw reply, its error redis-py's)."""
        if not isinstance(self._pipeline, LeanScripts):
            return None
        run_keys, args = self._append_call(run_id, attempt, batch)
        future = self._pipeline.call_soon(self._s["APPEND"], run_keys, args)
        future.add_done_callback(functools.partial(_appended, done))
        return future

    def _append_call(self, run_id: str, attempt: int | None, batch: EventBatch
                     ) -> tuple[list[str], list[Any]]:
        to = self._append_to.get(run_id)
        if to is None:
            if len(self._append_to) >= MAX_APPEND_TO:
                self._append_to.clear()
            to = self._append_to[run_id] = (
                (keys.run_key(run_id), keys.events_key(run_id), keys.checkpoint_key(run_id),
                 keys.inflight_key(run_id, "steer"), keys.inflight_key(run_id, "follow_up")),
                self._channel(run_id), f"e:{run_id}")
        run_keys, channel, note = list(to[0]), to[1], to[2]
        args: list[Any] = [
            "" if attempt is None else attempt, batch.token or "", len(batch.events),
            len(batch.checkpoint), len(batch.acks), len(batch.fields or {}), channel, note]
        for type_, body in batch.events:
            args += (type_, body)
        args += batch.checkpoint
        for kind, message_id in batch.acks:
            args += (kind, message_id)
        for name, value in encode_fields(batch.fields or {}).items():
            args += (name, value)
        return run_keys, args

    @guard
    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """See ``Backend.read_events``."""
        (rows,) = await self._commands(_xrange(run_id, after, limit))
        return _stored(rows)

    @guard
    async def get_run_and_events(self, run_id: str, after: int, limit: int
                                 ) -> tuple[RunRecord | None, list[StoredEvent]]:
        """See ``Backend.get_run_and_events``: HGETALL and XRANGE in one round trip."""
        raw, rows = await self._commands(("HGETALL", keys.run_key(run_id)),
                                         _xrange(run_id, after, limit))
        return decode_record(pairs(raw)), _stored(rows)

    async def wait_events(self, run_id: str, after: int, timeout: float) -> list[StoredEvent]:  # noqa: ASYNC109
        """See ``Backend.wait_events`` (woken by the process's one notify listener, which also
        hands over the batch it announced): the waiter is registered before anything is
        checked, so a batch landing in between still wakes it."""
        notes = self.notifier
        await notes.follow(run_id)
        waiter = notes.events_waiter(run_id)
        if notes.watch(run_id) != after:  # not known to be caught up: look in the log
            events = notes.events_after(run_id, after) or await self.read_events(run_id, after)
            if events:
                return events
        try:
            async with asyncio.timeout(timeout):
                await waiter.wait()
        except TimeoutError:
            return []
        return notes.events_after(run_id, after) or await self.read_events(run_id, after)

    # -- cancel -----------------------------------------------------------------------
    @guard
    async def request_cancel(self, run_id: str) -> None:
        """See ``Backend.request_cancel``: a flag on the run plus a ``c:<run>`` note."""
        await self._run("CANCEL", [keys.run_key(run_id)],
                        ["", self._channel(run_id), f"c:{run_id}"])

    @guard
    async def cancel_requested(self, run_id: str) -> bool:
        """See ``Backend.cancel_requested``."""
        (flag,) = await self._commands(("HGET", keys.run_key(run_id), "cancel"))
        return bool(flag)

    async def wait_cancel(self, run_id: str) -> None:
        """See ``Backend.wait_cancel``."""
        waiter = self.notifier.cancel_waiter(run_id)
        try:
            await self.notifier.follow(run_id)
            if not await _quietly(self.cancel_requested(run_id)):
                await waiter.wait()
        finally:
            self.notifier.forget_cancel(run_id)


async def _quietly(check: Awaitable[bool]) -> bool:
    try:
        return await check
    except BackendError:
        return False


def _appended(done: Callable[[int, BaseException | None], None],
              future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        done(0, BackendError("redis: the write was cancelled"))
    elif (error := future.exception()) is not None:
        done(0, mapped(error))
    else:
        done(int(future.result()), None)


def _xrange(run_id: str, after: int, limit: int) -> tuple[str, ...]:
    return ("XRANGE", keys.events_key(run_id), f"{max(after, 0) + 1}-0", "+", "COUNT", str(limit))


def _flat(mapping: dict[str | bytes, bytes]) -> list[str | bytes]:
    """A field/value mapping as HSET's arguments."""
    return [item for pair in mapping.items() for item in pair]


def pairs(raw: Any) -> dict[bytes, bytes]:
    """An HGETALL reply as a dict: redis-py's dict, or RESP2's flat list of fields and values."""
    if isinstance(raw, dict):
        return raw
    return dict(zip(raw[::2], raw[1::2], strict=True))


def _stored(rows: Any) -> list[StoredEvent]:
    """XRANGE rows (each entry's fields a dict from redis-py, a flat list from RESP2)."""
    return [StoredEvent(int(eid.split(b"-", 1)[0]), *_event_fields(f)) for eid, f in rows]


def _event_fields(fields: Any) -> tuple[str, bytes]:
    f = pairs(fields)
    return f[b"t"].decode(), f[b"d"]
