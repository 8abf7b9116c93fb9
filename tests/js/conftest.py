"""The live server fixtures of the API tests, for the Node clients here (both backends)."""

from tests.api.conftest import api, redis_server_url, redis_url

__all__ = ["api", "redis_server_url", "redis_url"]
