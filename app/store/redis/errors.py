"""Redis failures as the backend's exception tree: one decorator for every Redis module."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from redis.exceptions import RedisClusterException, RedisError, ResponseError

from app.store.errors import BackendError, FencedOut, RunEnded, RunNotFound

P = ParamSpec("P")
T = TypeVar("T")


def guard(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """Map Redis failures to the backend's exception tree."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except (RedisError, RedisClusterException, OSError) as exc:
            error = mapped(exc)
            if isinstance(error, FencedOut | RunNotFound | RunEnded):
                raise error from None
            raise error from exc

    return wrapper


def mapped(exc: BaseException) -> BaseException:
    """The backend's exception for a Redis failure (anything else unchanged)."""
    if isinstance(exc, ResponseError):
        text = str(exc)
        if "FENCED" in text:
            return FencedOut(text)
        if "NOTFOUND" in text:
            return RunNotFound(text)
        if "ENDED" in text:
            return RunEnded(text)
        return BackendError(text)
    if isinstance(exc, RedisError | RedisClusterException | OSError):
        return BackendError(f"redis: {exc}")
    return exc
