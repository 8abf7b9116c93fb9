"""The backend contract for threads (both backends implement it beside ``Backend``).

Every method may raise ``BackendError``. ``post_thread_run`` and ``settle_thread`` are each one
atomic step on the thread and its runs (one Lua script on one Redis Cluster slot), which is
what makes "at most one active run" and "no message lost at a run's end" hold under races.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

from app.store.contract import Backend
from app.store.thread_records import PostOutcome, ThreadPage, ThreadPost, ThreadRecord

DEFAULT_THREAD_TTL = 30 * 86400.0
"""Seconds an idle thread is kept after its last activity (``AGENTLOOP_THREAD_TTL``)."""


class ThreadStore(Protocol):
    """Threads: records, history, the atomic post and settle steps."""

    thread_ttl: float

    async def create_thread(self, record: ThreadRecord) -> None:
        """Store a new, idle thread."""
        ...

    async def create_thread_if_absent(self, record: ThreadRecord) -> bool:
        """Store ``record`` unless a thread with its id exists (one atomic step: of two
        racing creators exactly one stores it); whether this call stored it."""
        ...

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread, or None."""
        ...

    async def list_threads(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                           limit: int, cursor: str | None) -> ThreadPage:
        """The tenant's threads, newest first, filtered, paginated by an opaque cursor."""
        ...

    async def delete_thread(self, thread_id: str) -> None:
        """Drop the thread; its active run is cancelled and a waiting run never starts."""
        ...

    async def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        """The conversation: the history plus what the active run added so far (its input
        before it started)."""
        ...

    async def thread_run_inputs(self, run_id: str) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
        """``(history, prompts)`` a run of a thread starts from."""
        ...

    async def post_thread_run(self, thread_id: str, post: ThreadPost) -> PostOutcome:
        """Post a message (``app.store.thread_records``); raises ``ThreadNotFound``,
        ``IdempotencyConflict``."""
        ...

    async def settle_thread(self, thread_id: str) -> str | None:
        """If the active run has ended: its messages join the history and the next run (if
        any message waits) is created and dispatched; returns that run's id."""
        ...

    async def wait_thread(self, thread_id: str, runs: int,
                          timeout: float) -> ThreadRecord | None:  # noqa: ASYNC109
        """The thread once it has more than ``runs`` runs, or after ``timeout`` s whatever
        it has (None: it is gone)."""
        ...


class ThreadBackend(Backend, ThreadStore, Protocol):
    """A backend with threads (both built-in backends)."""


def threads(backend: Backend) -> ThreadBackend:
    """``backend`` as a thread store (both built-in backends are)."""
    return cast(ThreadBackend, backend)
