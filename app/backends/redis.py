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
from collections.abc import Awaitable
from typing import Any, ParamSpec, TypeVar

import orjson
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.backends import redis_keys as keys
from app.backends import redis_scripts as lua
from app.backends.base import (
    BackendError,
    Claim,
    EventBatch,
    IdempotencyConflict,
    QueueItemTaken,
    RunNotFound,
    RunPage,
    RunRecord,
    ServiceEvents,
    StoredEvent,
    first_event_body,
    parse_queue_entry,
    queue_entry,
    queue_event_body,
)
from app.backends.memory import make_cursor, matches, parse_cursor
from app.backends.redis_cluster import ClusterScripts, NodeClients, cluster_client
from app.backends.redis_errors import guard
from app.backends.redis_notify import Notifier
from app.backends.redis_notify_sharded import ShardedNotifier
from app.backends.redis_parking import RedisParking
from app.backends.redis_pipeline import ScriptPipeline
from app.backends.redis_records import decode_record, encode_fields, encode_record
from app.backends.redis_threads import RedisThreads
from app.events import ServiceEvent
from app.queues import QueuedMessage, QueueKind, QueueMode

P = ParamSpec("P")
T = TypeVar("T")
_Entry = tuple[bytes, dict[bytes, bytes] | None]
"""A job stream entry: its id and fields (None once deleted)."""
BLOCK_MAX = 1.0
"""Longest XREADGROUP block (s): far below the socket timeout (redis-py defaults hang ~60 s)."""




class RedisBackend(RedisThreads, RedisParking, ServiceEvents):
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
        self._pipeline: ScriptPipeline | ClusterScripts
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
            self._pipeline = ScriptPipeline(self.client)
            self.notifier = Notifier(self.client, self.cancel_requested)
        self.feeds = self.notifier.feeds  # live SSE frames from the notes (app.sse_tap)
        self._s = {name: self.client.register_script(getattr(lua, name)) for name in (
            "APPEND", "UPDATE", "CLAIM", "FINISH", "RELEASE_RUN", "ENQUEUE", "CLOSE_QUEUES",
            "WITHDRAW", "TAKE", "RELEASE", "CANCEL")}
        self._group_ready = False
        self._next_scan = 0.0

    async def _run(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        return await self._pipeline.call(self._s[name], keys_, args)

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

        def write_run(pipe: Any) -> None:
            if first_event is not None:
                record.last_seq = 1
                type_, data = first_event_body(record.id, first_event)
                pipe.xadd(keys.events_key(record.id), {"t": type_, "d": data}, id="1-0")
            mapping: Any = encode_record(record)
            pipe.hset(keys.run_key(record.id), mapping=mapping)

        if self._nodes is not None:  # the run's slot, confirmed, strictly before its job
            await self._nodes.durable(keys.run_key(record.id), write_run)
            await self.client.zadd(keys.tenant_runs_key(record.tenant),
                                   {record.id: record.created_at})
            await self._add_job(record.id)
            return record, True
        async with self.client.pipeline(transaction=False) as pipe:  # in order: job last
            write_run(pipe)
            pipe.zadd(keys.tenant_runs_key(record.tenant), {record.id: record.created_at})
            pipe.xadd(keys.JOBS_STREAM, {"run": record.id})
            await pipe.execute()
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
        raw: Any = await self.client.hgetall(keys.run_key(run_id))
        return decode_record(raw)

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
        args: list[Any] = [
            "" if attempt is None else attempt, batch.token or "", len(batch.events),
            len(batch.checkpoint), len(batch.acks), len(batch.fields or {}),
            self._channel(run_id), f"e:{run_id}"]
        for type_, body in batch.events:
            args += (type_, body)
        args += batch.checkpoint
        for kind, message_id in batch.acks:
            args += (kind, message_id)
        for name, value in encode_fields(batch.fields or {}).items():
            args += (name, value)
        run_keys = [keys.run_key(run_id), keys.events_key(run_id), keys.checkpoint_key(run_id),
                    keys.inflight_key(run_id, "steer"), keys.inflight_key(run_id, "follow_up")]
        return int(await self._run("APPEND", run_keys, args))

    @guard
    async def read_events(self, run_id: str, after: int, limit: int = 1000) -> list[StoredEvent]:
        """See ``Backend.read_events``."""
        rows: Any = await self.client.xrange(keys.events_key(run_id), f"{max(after, 0) + 1}-0", "+",
                                        count=limit)
        return _stored(rows)

    @guard
    async def get_run_and_events(self, run_id: str, after: int, limit: int
                                 ) -> tuple[RunRecord | None, list[StoredEvent]]:
        """See ``Backend.get_run_and_events``: HGETALL and XRANGE in one pipeline."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.run_key(run_id))
            pipe.xrange(keys.events_key(run_id), f"{max(after, 0) + 1}-0", "+", count=limit)
            raw, rows = await pipe.execute()
        return decode_record(raw), _stored(rows)

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

    # -- queues -----------------------------------------------------------------------
    @guard
    async def enqueue(self, run_id: str, kind: QueueKind, item: QueuedMessage) -> int:
        """See ``Backend.enqueue``: one ENQUEUE script (RPUSH + XADD, refused once closed)."""
        body = queue_event_body(run_id, "message_queued", item.id, kind)
        run_keys = [keys.run_key(run_id), keys.queue_key(run_id, kind), keys.events_key(run_id)]
        return int(await self._run("ENQUEUE", run_keys, ["", queue_entry(item), body,
                                                         self._channel(run_id), f"e:{run_id}"]))

    @guard
    async def close_queues(self, run_id: str, attempt: int) -> bool:
        """See ``Backend.close_queues``."""
        run_keys = [keys.run_key(run_id), keys.queue_key(run_id, "steer"),
                    keys.queue_key(run_id, "follow_up")]
        return bool(await self._run("CLOSE_QUEUES", run_keys, [attempt]))

    @guard
    async def list_queue(self, run_id: str) -> list[tuple[QueueKind, QueuedMessage]]:
        """See ``Backend.list_queue``."""
        out: list[tuple[QueueKind, QueuedMessage]] = []
        for kind in ("steer", "follow_up"):
            entries: Any = await self.client.lrange(keys.queue_key(run_id, kind), 0, -1)
            for raw in entries:
                out.append((kind, parse_queue_entry(raw)))
        return out

    @guard
    async def withdraw(self, run_id: str, message_id: str) -> QueueKind:
        """See ``Backend.withdraw``."""
        bodies = [queue_event_body(run_id, "message_withdrawn", message_id, kind)
                  for kind in ("steer", "follow_up")]
        answer = await self._run("WITHDRAW", [keys.run_key(run_id), *keys.queue_keys(run_id),
                                              keys.events_key(run_id)],
                                 ["", message_id, *bodies, self._channel(run_id), f"e:{run_id}"])
        answer = answer.decode()
        if answer == "taken":
            raise QueueItemTaken(message_id)
        if answer == "none":
            raise RunNotFound(message_id)
        return "steer" if answer == "steer" else "follow_up"

    @guard
    async def take(self, run_id: str, kind: QueueKind, mode: QueueMode,
                   attempt: int | None = None) -> list[QueuedMessage]:
        """See ``Backend.take``."""
        raw = await self._run("TAKE", self._one_queue(run_id, kind),
                              ["" if attempt is None else attempt, mode])
        return [parse_queue_entry(r) for r in raw]

    async def ack(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``Backend.ack``."""
        await self.append_events(run_id, None, EventBatch(acks=[(kind, q.id) for q in items]))

    @guard
    async def release(self, run_id: str, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """See ``Backend.release``."""
        await self._run("RELEASE", self._one_queue(run_id, kind), ["", *(q.id for q in items)])

    def _one_queue(self, run_id: str, kind: QueueKind) -> list[str]:
        return [keys.run_key(run_id), keys.queue_key(run_id, kind),
                keys.inflight_key(run_id, kind), keys.taken_key(run_id)]

    @guard
    async def queue_lengths(self, run_id: str) -> dict[str, int]:
        """See ``Backend.queue_lengths``."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.llen(keys.queue_key(run_id, "steer"))
            pipe.llen(keys.queue_key(run_id, "follow_up"))
            steer, follow_up = await pipe.execute()
        return {"steer": int(steer), "follow_up": int(follow_up)}

    # -- cancel -----------------------------------------------------------------------
    @guard
    async def request_cancel(self, run_id: str) -> None:
        """See ``Backend.request_cancel``: a flag on the run plus a ``c:<run>`` note."""
        await self._run("CANCEL", [keys.run_key(run_id)],
                        ["", self._channel(run_id), f"c:{run_id}"])

    @guard
    async def cancel_requested(self, run_id: str) -> bool:
        """See ``Backend.cancel_requested``."""
        return bool(await self.client.hget(keys.run_key(run_id), "cancel"))

    async def wait_cancel(self, run_id: str) -> None:
        """See ``Backend.wait_cancel``."""
        waiter = self.notifier.cancel_waiter(run_id)
        try:
            await self.notifier.follow(run_id)
            if not await _quietly(self.cancel_requested(run_id)):
                await waiter.wait()
        finally:
            self.notifier.forget_cancel(run_id)

    # -- dispatch ---------------------------------------------------------------------
    async def claim(self, worker: str, timeout: float) -> Claim | None:  # noqa: ASYNC109
        """See ``Backend.claim``."""
        claims = await self.claim_many(worker, timeout, 1)
        return claims[0] if claims else None

    @guard
    async def claim_many(self, worker: str, timeout: float,  # noqa: ASYNC109
                         count: int) -> list[Claim]:
        """See ``Backend.claim_many``: lapsed runs first (XAUTOCLAIM, looked for at most once a
        second), then new jobs (XREADGROUP COUNT), assigned in one pipeline."""
        try:
            return await self._claim(worker, timeout, count)
        except ResponseError as exc:
            if "NOGROUP" in str(exc):  # Redis lost its data (restart without persistence)
                self._group_ready = False
            raise

    async def _claim(self, worker: str, timeout: float,  # noqa: ASYNC109
                     count: int) -> list[Claim]:
        await self._ensure_group()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            entries: list[tuple[bytes, dict[bytes, bytes] | None]] = []
            if loop.time() >= self._next_scan:
                entries = await self._lapsed(worker, count)
                if not entries:
                    self._next_scan = loop.time() + min(0.5, self.lease / 4)
            if not entries:
                # wake for the next scan too: a lapsed worker is noticed within one interval
                block = min(BLOCK_MAX, deadline - loop.time(),
                            max(self._next_scan - loop.time(), 0.05))
                if block <= 0:
                    return []
                rows: Any = await self.client.xreadgroup(
                    keys.JOBS_GROUP, worker, {keys.JOBS_STREAM: ">"}, count=count,
                    block=max(1, int(block * 1000)))
                entries = [entry for _, found in rows or [] for entry in found]
            claims = await self._assign_all(worker, entries)
            if claims:
                await self._alive(worker)  # a claim is a heartbeat
                return claims

    async def _lapsed(self, worker: str, count: int) -> list[_Entry]:
        """Jobs of workers whose liveness key has lapsed, now claimed for ``worker``."""
        summary: Any = await self.client.xpending(keys.JOBS_STREAM, keys.JOBS_GROUP)
        me = worker.encode()
        holders = [c["name"] for c in summary.get("consumers") or [] if c["name"] != me]
        if not holders:
            return []
        alive: Any = await self.client.mget([keys.worker_key(h.decode()) for h in holders])
        entries: list[_Entry] = []
        for holder, live in zip(holders, alive, strict=True):
            if not live and len(entries) < count:
                entries += await self._jobs_of(holder, worker, count - len(entries))
        return entries

    async def _jobs_of(self, holder: bytes, worker: str, count: int) -> list[_Entry]:
        rows: Any = await self.client.xpending_range(keys.JOBS_STREAM, keys.JOBS_GROUP, "-", "+",
                                                     count, consumername=holder)
        if not rows:
            return []
        claimed: Any = await self.client.xclaim(
            keys.JOBS_STREAM, keys.JOBS_GROUP, worker, int(self.lease * 500),
            [r["message_id"] for r in rows])
        return list(claimed)

    async def _alive(self, worker: str) -> None:
        await self.client.set(keys.worker_key(worker), b"1", px=max(1, int(self.lease * 1000)))

    async def _assign_all(self, worker: str, entries: list[tuple[bytes, dict[bytes, bytes] | None]]
                          ) -> list[Claim]:
        found = await asyncio.gather(*(self._assign(worker, entry_id, fields)
                                       for entry_id, fields in entries))
        return [claim for claim in found if claim is not None]

    async def _assign(self, worker: str, entry_id: bytes, fields: dict[bytes, bytes] | None
                      ) -> Claim | None:
        run_id = (fields or {}).get(b"run", b"").decode()
        try:
            attempt = int(await self._run("CLAIM", [keys.run_key(run_id),
                                                    *keys.queue_keys(run_id)],
                                          ["", orjson.dumps(worker), entry_id]))
        except ResponseError as exc:
            if "NOTFOUND" not in str(exc):
                raise
            attempt = 0
        if attempt == 0:  # ended or expired: the job is done
            await self._drop_job(entry_id)
            return None
        return Claim(run_id=run_id, attempt=attempt, resumed=attempt > 1)

    async def _drop_job(self, entry_id: bytes | str) -> None:
        if not entry_id:
            return
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.xack(keys.JOBS_STREAM, keys.JOBS_GROUP, entry_id)
            pipe.xdel(keys.JOBS_STREAM, entry_id)
            await pipe.execute()

    @guard
    async def heartbeat(self, worker: str) -> None:
        """See ``Backend.heartbeat``: one SET of the worker's liveness key (PX lease)."""
        await self._alive(worker)

    @guard
    async def finish(self, run_id: str, attempt: int) -> None:
        """See ``Backend.finish``: expire the run's keys, acknowledge its job."""
        job = await self._run("FINISH", keys.run_keys(run_id), [attempt, int(self.run_ttl)])
        await self._drop_job(job)

    @guard
    async def release_run(self, run_id: str, attempt: int) -> None:
        """See ``Backend.release_run``: a fresh job entry, so a waiting worker takes it now."""
        job = await self._run("RELEASE_RUN", [keys.run_key(run_id)], [attempt])
        await self._add_job(run_id)
        await self._drop_job(job)


async def _quietly(check: Awaitable[bool]) -> bool:
    try:
        return await check
    except BackendError:
        return False


def _stored(rows: Any) -> list[StoredEvent]:
    return [StoredEvent(int(eid.split(b"-", 1)[0]), f[b"t"].decode(), f[b"d"]) for eid, f in rows]
