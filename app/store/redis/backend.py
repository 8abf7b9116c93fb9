"""The Redis backend (redis.asyncio + hiredis): many processes, runs survive a worker crash.

Key layout in ``keys``; every per-run write is one Lua script from ``scripts``
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

from app.store.redis.agents import RedisAgents
from app.store.redis.dispatch import RedisDispatch
from app.store.redis.parking import RedisParking
from app.store.redis.queues import RedisQueues
from app.store.redis.quotas import RedisQuotas
from app.store.redis.runs import RedisRuns
from app.store.redis.threads import RedisThreads
from app.store.redis.webhooks import RedisWebhooks


class RedisBackend(RedisThreads, RedisParking, RedisQueues, RedisDispatch, RedisAgents,
                   RedisQuotas, RedisWebhooks, RedisRuns):
    """The Redis ``Backend`` (``RedisCore`` has its settings)."""
