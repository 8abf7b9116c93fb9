"""Shared fixtures: see tests/support/ for the wire server and the Redis/uvicorn helpers.

Every async test runs on uvloop, the loop ``agentloop serve`` and ``agentloop worker`` use in
production (subprocess support, timers and transports differ from asyncio's default loop).
The Redis Cluster fixtures live here so that one cluster (six processes) serves the session.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import uvloop

from tests.support.redis_cluster import cluster_url, redis_cluster

__all__ = ["cluster_url", "redis_cluster"]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> Mapping[str, Callable[[], Any]]:
    """One factory (test names stay unchanged): the service's event loop."""
    return {"uvloop": uvloop.new_event_loop}
