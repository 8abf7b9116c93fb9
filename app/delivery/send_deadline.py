"""A deadline on each send of a stream, with one lazily re-armed timer for the whole stream.

``asyncio.timeout`` around every send made a timer, a context and a cancel per SSE frame (py-spy:
~4 % of a streaming server's samples). ``SendDeadline`` keeps one timer: entering records when
the send began, leaving forgets it, and the timer, when it fires, either cancels the task (a
send has been blocked for ``seconds``) or re-arms for the current send's due time. Timeline::

    with d: send ✓   with d: send ✓   …   with d: send ─── blocked ─── timer: due → task.cancel()
    timer ─ fires: no send (or a later one) in progress ─ re-arm or sleep ─┘

After the cancel the caller sees ``CancelledError``; ``expired`` tells it the deadline did it
(then it calls ``uncancel`` and drops the stream, as it did on ``TimeoutError`` before).
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class SendDeadline:
    """See the module docstring; use one per task, around each send (``seconds`` None: no
    deadline)."""

    __slots__ = ("_loop", "_since", "_task", "_timer", "expired", "seconds")

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._since: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def __enter__(self) -> SendDeadline:
        if self.seconds is not None:
            self._since = now = self._loop.time()
            if self._timer is None:
                self._timer = self._loop.call_at(now + self.seconds, self._check)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._since = None

    def close(self) -> None:
        """Stop the timer (the stream is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        if self._since is None or self.seconds is None:
            return  # no send in progress: the next one arms the timer again
        due = self._since + self.seconds
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._check)
        elif self._task is not None and not self.expired:
            self.expired = True
            self._task.cancel()
