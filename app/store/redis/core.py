"""The connections and shared steps of the Redis backend (``RedisBackend`` is its parts over
this base: ``runs``, ``queues``, ``dispatch``, ``parking``, ``threads``).

Every Lua script is registered here once (``scripts``, ``thread_scripts``); a part calls one
with ``_run(name, keys, args)``: on the lean connection where the URL allows
(``lean_scripts``), else redis-py's pipeline, or per master on a cluster (``cluster``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

import orjson
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.store.fresh_runs import FreshRuns
from app.store.records import EventBatch, RunRecord
from app.store.redis import keys, thread_scripts
from app.store.redis import scripts as lua
from app.store.redis.cluster import ClusterScripts, NodeClients, cluster_client
from app.store.redis.errors import guard
from app.store.redis.lean_scripts import LeanScripts
from app.store.redis.notes_reader import lean_params
from app.store.redis.notify import Notifier
from app.store.redis.notify_sharded import ShardedNotifier
from app.store.redis.pipeline import ScriptCalls, ScriptPipeline
from app.store.redis.records import decode_record, encode_fields, pairs
from app.store.threads import DEFAULT_THREAD_TTL

LEAN_SCRIPTS = True
"""Script calls through ``LeanScripts`` where the connection allows (tests compare both)."""
MAX_APPEND_TO = 10_000
"""Runs whose APPEND keys are kept (built from the run id per batch they cost ~2 µs)."""
RUN_SCRIPTS = ("APPEND", "UPDATE", "CLAIM", "FINISH", "RELEASE_RUN", "ENQUEUE", "CLOSE_QUEUES",
               "WITHDRAW", "TAKE", "RELEASE", "CANCEL", "PARK", "DECIDE", "WAKE", "COUNT_HIT",
               "PUT_AGENT", "ADMIT", "ACCRUE", "CLAIM_WEBHOOKS", "TAKE_OVER_KEY")
THREAD_SCRIPTS = ("SETTLE", "POST", "DELETE")
STRANDED_AFTER_S = 30.0
"""Cluster: a dispatch mark this old belongs to a step whose process died between setting a
run ``queued`` and writing its job (a live one writes it within a round trip, or a failover's
retries): the stranded-run sweep dispatches the run if it is still queued."""


class RedisCore:
    """See the module docstring. ``lease`` and ``run_ttl`` in seconds; ``max_connections``
    bounds the pool (callers wait up to ``socket_timeout`` for a free connection);
    ``client_name`` shows in CLIENT LIST (workers use their name); ``cluster``: ``url`` names
    seed nodes of a Redis Cluster (comma-separated); ``write_window``: seconds the event
    batches of all runs may wait to share one write (``LeanScripts``' window)."""

    name = "redis"

    def __init__(self, url: str, *, lease: float = 5.0, run_ttl: float = 7 * 86400.0,
                 connect_timeout: float = 0.5, socket_timeout: float = 5.0,
                 max_connections: int = 256, client_name: str | None = None,
                 cluster: bool = False, write_window: float = 0.0) -> None:
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
            self._nodes = NodeClients(self.client, max_connections, socket_timeout)
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
                              else LeanScripts(self.client, lean, timeout=socket_timeout,
                                               window=write_window))
            self.notifier = Notifier(self.client, self.cancel_requested)
        self.feeds = self.notifier.feeds  # live SSE frames from the notes (app.delivery.tap)
        self.fresh_runs = FreshRuns()  # created here: a new stream's first page
        self.thread_ttl = DEFAULT_THREAD_TTL
        self._s = {name: self.client.register_script(getattr(lua, name))
                   for name in RUN_SCRIPTS}
        self._s.update({name: self.client.register_script(getattr(thread_scripts, name))
                        for name in THREAD_SCRIPTS})
        if isinstance(self._pipeline, LeanScripts):  # a call meeting NOSCRIPT is done late
            self._pipeline.preload = list(self._s.values())
        self._group_ready = False
        self._next_scan = 0.0
        self._alive_at: dict[str, float] = {}  # worker: loop time its liveness key was set

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

    @guard
    async def append_events(self, run_id: str, attempt: int | None, batch: EventBatch) -> int:
        """See ``EventLog.append_events``: one APPEND script (XADD ``<seq>-0`` per event)."""
        run_keys, args = self._append_call(run_id, attempt, batch)
        return int(await self._run("APPEND", run_keys, args))

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
        args: list[Any] = [  # the token as bytes: unique per batch, not for ``_BLOCKS``
            "" if attempt is None else attempt, (batch.token or "").encode(), len(batch.events),
            len(batch.checkpoint), len(batch.acks), len(batch.fields or {}), channel, note]
        for type_, body in batch.events:
            args += (type_, body)
        args += batch.checkpoint
        for kind, message_id in batch.acks:
            args += (kind, message_id)
        if batch.fields:  # a text delta's batch has none: no set or dict built for it
            for name, value in encode_fields(batch.fields).items():
                args += (name, value)
        return run_keys, args

    def _notes(self) -> str:
        """The thread scripts' notes channel: ``al:notify``; '' on a cluster (each note then
        goes to its run's or thread's shard channel, in the thread's slot)."""
        return keys.NOTIFY_CHANNEL if self._nodes is None else ""

    async def _add_job(self, run_id: str, marks: Sequence[str] = ()) -> None:
        """A dispatch entry for the run (on a cluster: confirmed by a replica, the dispatch
        ``marks`` of the step that queued it gone in the same round trip)."""
        if self._nodes is None:
            await self.client.xadd(keys.JOBS_STREAM, {"run": run_id})
            return

        def fill(pipe: Any) -> None:
            pipe.xadd(keys.JOBS_STREAM, {"run": run_id})
            if marks:
                pipe.zrem(keys.DISPATCH_MARKS, *marks)

        await self._nodes.durable(keys.JOBS_STREAM, fill)

    async def _drop_job(self, entry_id: bytes | str) -> None:
        if not entry_id:
            return
        await self._commands(("XACK", keys.JOBS_STREAM, keys.JOBS_GROUP, entry_id),
                             ("XDEL", keys.JOBS_STREAM, entry_id))

    def _dispatch_keys(self) -> list[str]:
        """What a run script that may set its run ``queued`` gets at the end of its KEYS: on
        one node the job stream and the parked index, so the script adds the run's job in its
        own step (``scripts._DISPATCH``); on a cluster nothing (they are in other slots: the
        caller's ``_woken`` adds it after)."""
        return [] if self._nodes is not None else [keys.JOBS_STREAM, keys.PARKED_INDEX]

    async def _mark(self, *run_ids: str) -> list[str]:
        """Cluster: before a step that may set one of ``run_ids`` ``queued`` (a script in the
        run's slot, whose job lives in another), a mark per run in ``al:jobs``' slot; the
        step's ``_woken`` removes them with the job. A mark left older than
        ``STRANDED_AFTER_S`` is a step whose process died in between: the sweep
        (``redispatch_stranded``) dispatches its run if it is queued. One node: none (the
        step's script dispatches the run itself)."""
        if self._nodes is None:
            return []
        marks = [f"{run_id}|{secrets.token_hex(6)}" for run_id in run_ids if run_id]
        if marks:
            await self.client.zadd(keys.DISPATCH_MARKS, dict.fromkeys(marks, time.time()))
        return marks

    async def _woken(self, run_id: str | None, marks: Sequence[str] = (), *,
                     parked: bool = True) -> None:
        """The global half of a step that set ``run_id`` ``queued`` (None: it queued none):
        on a cluster its job, confirmed by a replica, with the step's marks gone in the same
        round trip, then it leaves the approval deadline index (``parked``). On one node
        nothing: the script did it in its own step (``_dispatch_keys``)."""
        if self._nodes is None:
            return
        if run_id is None:
            if marks:
                await self.client.zrem(keys.DISPATCH_MARKS, *marks)
            return
        await self._add_job(run_id, marks)
        if parked:
            await self.client.zrem(keys.PARKED_INDEX, run_id)

    @guard
    async def get_run(self, run_id: str) -> RunRecord | None:
        """See ``RunStore.get_run``."""
        (raw,) = await self._commands(("HGETALL", keys.run_key(run_id)))
        return decode_record(pairs(raw))

    @guard
    async def _status(self, run_id: str) -> str | None:
        """The run's status alone (None: no such run)."""
        (raw,) = await self._commands(("HGET", keys.run_key(run_id), "status"))
        return orjson.loads(raw) if raw else None

    @guard
    async def cancel_requested(self, run_id: str) -> bool:
        """See ``CancelSignal.cancel_requested``."""
        (flag,) = await self._commands(("HGET", keys.run_key(run_id), "cancel"))
        return bool(flag)
