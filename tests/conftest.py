"""Shared fixtures: see tests/support/ for the wire server and the Redis/uvicorn helpers.

Every async test runs on the loop ``agentloop serve`` uses in production: uvloop, accepting
connections in batches (``app.process.accept_loop``; ``agentloop worker`` runs plain uvloop, the
same loop for everything but a server's accept). Subprocess support, timers and transports
differ from asyncio's default loop.
The Redis Cluster fixtures live here so that one cluster (six processes) serves the session.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from app.process.accept_loop import new_event_loop
from tests.support.redis_cluster import cluster_url, redis_cluster

__all__ = ["cluster_url", "redis_cluster"]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> Mapping[str, Callable[[], Any]]:
    """One factory (test names stay unchanged): the service's event loop."""
    return {"uvloop": new_event_loop}


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After each test module: the young generations collected, then every object still
    alive frozen out of the collector's reach (``gc.freeze``).

    A test session keeps ~2 million objects alive by its end (collected items, reports,
    imported schemas), and CPython's full collection walks all of them: measured over one
    ``make test`` (a ``gc.callbacks`` timer), 33 full passes took up to 1.68 s each, 13 of
    them over 0.5 s. Each stops every thread, the live servers' event loops with them, so a
    0.5 s Redis connect timeout met one and a cluster thread test answered 503. Production
    freezes its start-up objects the same way (``app.process.cli.tune_gc``); cyclic garbage a module
    leaves behind stays uncollected, which a finite session can afford."""
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", None):
        gc.collect(1)
        gc.freeze()
