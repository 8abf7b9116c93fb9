"""The store: the contract (``contract``: small protocols, ``Backend`` is all of them), its
records and errors, and two backends, ``memory`` and ``redis``.

``make_backend(None)`` is the in-process default; a Redis URL selects the Redis backend (only
``app/store/redis/`` imports ``redis``). Settings: ``lease`` (seconds a claim lasts without
a heartbeat of its worker, default 5), ``run_ttl`` (seconds a finished run is kept, default 7
days) and, for Redis, ``connect_timeout`` and ``cluster`` (the URL names seed nodes of a Redis
Cluster).
"""

from __future__ import annotations

from typing import Any

from app.store.contract import Backend
from app.store.errors import (
    BackendError,
    FencedOut,
    IdempotencyConflict,
    QueueItemTaken,
    RunEnded,
    RunNotFound,
)
from app.store.records import Claim, EventBatch, RunPage, RunRecord, StoredEvent

__all__ = [
    "Backend",
    "BackendError",
    "Claim",
    "EventBatch",
    "FencedOut",
    "IdempotencyConflict",
    "QueueItemTaken",
    "RunEnded",
    "RunNotFound",
    "RunPage",
    "RunRecord",
    "StoredEvent",
    "make_backend",
]


def make_backend(redis_url: str | None, **settings: Any) -> Backend:
    """The Redis backend for ``redis_url``, else the in-memory one (``thread_ttl``: seconds an
    idle thread is kept)."""
    thread_ttl = settings.pop("thread_ttl", None)
    backend: Any
    if redis_url:
        from app.store.redis.backend import RedisBackend

        backend = RedisBackend(redis_url, **settings)
    else:
        from app.store.memory.backend import MemoryBackend

        backend = MemoryBackend(**{k: v for k, v in settings.items() if k in ("lease", "run_ttl")})
    if thread_ttl is not None:
        backend.thread_ttl = float(thread_ttl)
    return backend  # type: ignore[no-any-return]
