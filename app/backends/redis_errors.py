"""Redis failures as the backend's exception tree: one decorator for every Redis module."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from redis.exceptions import RedisClusterException, RedisError, ResponseError

from app.backends.base import BackendError, FencedOut, RunEnded, RunNotFound

P = ParamSpec("P")
T = TypeVar("T")


def guard(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Map Redis failures to the backend's exception tree."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except ResponseError as exc:
            text = str(exc)
            if "FENCED" in text:
                raise FencedOut(text) from None
            if "NOTFOUND" in text:
                raise RunNotFound(text) from None
            if "ENDED" in text:
                raise RunEnded(text) from None
            raise BackendError(text) from exc
        except (RedisError, RedisClusterException, OSError) as exc:
            raise BackendError(f"redis: {exc}") from exc

    return wrapper
