"""How user code's failures are told apart and put into words, for the model call
(``streaming``) and the tool call (``tool_exec``) alike: a ``BaseException`` from user code is a
failure the run reports and survives, unless it is the coroutine being closed."""

from __future__ import annotations

import asyncio


def stopping_for_real(exc: BaseException) -> bool:
    """Whether ``exc`` must propagate: a ``GeneratorExit`` thrown into this coroutine because
    it is being closed (no task is running it) — anything else from user code is a failure."""
    if not isinstance(exc, GeneratorExit):
        return False
    try:
        return asyncio.current_task() is None
    except RuntimeError:  # no running loop: the coroutine is being garbage-collected
        return True


def base_exception_text(exc: BaseException) -> str:
    """``SystemExit(2)`` etc. as a sentence fragment the model can read."""
    detail = f" ({exc})" if str(exc) else ""
    return f"{type(exc).__name__}{detail} (the service caught it; the run goes on)"
