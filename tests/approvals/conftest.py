"""Human-in-the-loop tests run the real app over a real socket on both backends (the ``api``
fixture of tests/api) with real SSE clients."""

from tests.api.conftest import api, api_no_worker, redis_server_url, redis_url

__all__ = ["api", "api_no_worker", "redis_server_url", "redis_url"]
