"""Reading threads in the in-process backend (the read half of ``MemoryThreads``)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from app.store.ids import thread_of_run
from app.store.memory.core import MemoryCore, copy_thread
from app.store.paging import make_cursor, matches, parse_cursor
from app.store.thread_records import ThreadPage, ThreadRecord


class MemoryThreadReads(MemoryCore):
    """See ``app.store.contract.ThreadStore`` (the reads)."""

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """See ``ThreadStore.get_thread``."""
        thread = self._thread(thread_id)
        return copy_thread(thread.record) if thread else None

    async def list_threads(self, tenant: str, *, status: str | None, metadata: dict[str, str],
                           limit: int, cursor: str | None, owner: str | None = None
                           ) -> ThreadPage:
        """See ``ThreadStore.list_threads``."""
        found = [t.record for t in list(self._threads.values())
                 if t.record.tenant == tenant and self._thread(t.record.id) is not None]
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        after = parse_cursor(cursor)
        page = [copy_thread(r) for r in found if (after is None or (r.created_at, r.id) < after)
                and matches(r, status, metadata, owner)][:limit + 1]
        more = len(page) > limit
        page = page[:limit]
        return ThreadPage(threads=page, next_cursor=make_cursor(page[-1]) if more else None)

    async def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        """See ``ThreadStore.thread_messages``."""
        thread = self._thread(thread_id)
        if thread is None:
            return []
        out = list(thread.msgs)
        active = thread.record.active_run
        if active:
            state = self._state.get(active)
            out += (state.ckpt if state and state.ckpt else thread.inputs.get(active, []))
        return [orjson.loads(m) for m in out]

    async def thread_run_inputs(self, run_id: str) -> tuple[list[dict[str, Any]],
                                                             list[dict[str, Any]]]:
        """See ``ThreadStore.thread_run_inputs``."""
        thread = self._thread(thread_of_run(run_id) or "")
        if thread is None:
            return [], []
        return ([orjson.loads(m) for m in thread.msgs],
                [orjson.loads(m) for m in thread.inputs.get(run_id, [])])

    async def wait_thread(self, thread_id: str, runs: int,
                          timeout: float) -> ThreadRecord | None:  # noqa: ASYNC109
        """See ``ThreadStore.wait_thread``."""
        thread = self._thread(thread_id)
        if thread is not None and len(thread.record.runs) <= runs:
            try:
                async with asyncio.timeout(timeout):
                    await thread.changed.wait()
            except TimeoutError:
                pass
        return await self.get_thread(thread_id)
