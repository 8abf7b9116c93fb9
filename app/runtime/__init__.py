"""The loop for Python callers: ``from app import runtime``.

``runtime.exec`` / ``runtime.stream`` (``calls``) run the tool loop in-process, with the
service's models, tools and defaults; ``runtime.Thread`` (``thread``) keeps a conversation
with the service's thread semantics. ``Decision`` answers an approval in ``on_approval``.
"""

from __future__ import annotations

from typing import Any

from app.engine.approvals import Decision, WaitingCall
from app.runtime.calls import ExecResult, configure, exec, stream

__all__ = ["Decision", "ExecResult", "Thread", "ThreadBusy", "WaitingCall", "configure", "exec",
           "stream"]


def __getattr__(name: str) -> Any:
    """``runtime.Thread`` / ``runtime.ThreadBusy``: the conversation helper
    (``app.runtime.thread``, imported on first use: it builds on ``exec``)."""
    if name in ("Thread", "ThreadBusy"):
        from app.runtime import thread

        return getattr(thread, name)
    raise AttributeError(f"module 'app.runtime' has no attribute {name!r}")
