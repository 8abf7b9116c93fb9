"""How many event streams each holder has open in this process, and the most it may.

A holder is an end user (its tenant and subject), whatever credential it streams with: its own
token, or a stream token for one of its runs or threads. The tenant's own API key is no holder
(a backend that fans its users' streams out through one key is not capped), nor a stream token
for one of the tenant's own runs (the tenant's to hand out, to as many viewers as it
likes). The API's ``caller`` names the request's holder in the request state (``HOLDER``);
the app keeps one ``StreamHolds`` in its state (``stream_holds``). Every stream a door opens (an
``EventStreamResponse``; ``/mcp``'s call) takes a hold for as long as it is open; one past
the limit is answered with the app's refusal (``429``) before a byte of the stream is sent,
so one user's thousands of idle streams cannot take every connection of the process from
everybody else."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

HOLDER = "agentloop_stream_holder"
"""The request state's key naming the request's holder (None or absent: none)."""


class Hold:
    """One open stream of a holder; ``release`` (once, whatever the number of calls) when the
    stream ends."""

    __slots__ = ("_holder", "_holds")

    def __init__(self, holds: StreamHolds, holder: Hashable) -> None:
        self._holds: StreamHolds | None = holds
        self._holder = holder

    def release(self) -> None:
        if self._holds is not None:
            self._holds.give(self._holder)
            self._holds = None


class StreamHolds:
    """Open streams per holder in this process, at most ``limit`` each; ``refusal`` is the
    response to a stream over the limit (the API's error shape for that request's door)."""

    def __init__(self, limit: int, refusal: Callable[[Scope, int], Response]) -> None:
        self.limit = limit
        self.refusal = refusal
        self._open: dict[Hashable, int] = {}

    def take(self, holder: Hashable) -> Hold | None:
        """One more stream for ``holder``; None (nothing taken) when it has ``limit``."""
        held = self._open.get(holder, 0)
        if held >= self.limit:
            return None
        self._open[holder] = held + 1
        return Hold(self, holder)

    def give(self, holder: Hashable) -> None:
        """``holder``'s stream has ended."""
        held = self._open.get(holder, 0) - 1
        if held > 0:
            self._open[holder] = held
        else:
            self._open.pop(holder, None)


async def serve_held(scope: Scope, receive: Receive, send: Send,
                     serve: Callable[[], Awaitable[None]]) -> None:
    """``serve`` the request while its holder's stream hold is taken (given back when it
    ends); over the limit, the app's refusal instead. A request with no holder is served."""
    found = hold_of(scope)
    if found is None:
        await serve()
        return
    holds, holder = found
    hold = holds.take(holder)
    if hold is None:
        await holds.refusal(scope, holds.limit)(scope, receive, send)
        return
    try:
        await serve()
    finally:
        hold.release()


def hold_of(scope: Scope) -> tuple[StreamHolds, Hashable] | None:
    """The app's holds and the request's holder, if both there are."""
    state: Any = scope.get("state")
    holder = state.get(HOLDER) if isinstance(state, dict) else None
    if holder is None:
        return None
    app = scope.get("app")
    holds = getattr(getattr(app, "state", None), "stream_holds", None)
    return (holds, holder) if isinstance(holds, StreamHolds) else None
