"""``agentloop serve --processes N`` as an operator runs it: real processes, sockets and Redis."""

from __future__ import annotations

from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]
