"""Where a run's shared state starts (``app.engine.shared_state``), for the runner::

    the run's log holds state events (it ran before: a resumed or woken run) ─▶ fold them
    from where it started; otherwise where it starts:
        its request's ``state`` ─▶ that
        a thread's run ─▶ the state the thread's last run before it ended with (a regenerated
                          reply's run skipped: its changes went with it)
        else ─▶ none (a tool's first change makes one)
"""

from __future__ import annotations

from typing import Any

import orjson

from app.engine.shared_state import SharedState, fold
from app.store.contract import Backend
from app.store.ids import thread_of_run
from app.store.records import RunRecord
from app.worker.sink import retrying

PAGE = 500


async def run_state(backend: Backend, record: RunRecord) -> SharedState:
    """The run's shared state as it goes on (see the module docstring)."""
    start = record.request.get("state")
    if not isinstance(start, dict):
        start = await _thread_state(backend, record.id)
    if record.last_seq > 1:  # it ran before: its log has the changes since
        start = fold(await _state_events(backend, record.id), start)
    return SharedState(start)


async def _thread_state(backend: Backend, run_id: str) -> dict[str, Any] | None:
    thread_id = thread_of_run(run_id)
    if thread_id is None:
        return None
    thread = await retrying(lambda: backend.get_thread(thread_id))
    if thread is None or run_id not in thread.runs:
        return None
    for earlier in reversed(thread.runs[:thread.runs.index(run_id)]):
        found = await retrying(lambda: backend.get_run(earlier))  # noqa: B023
        if found is not None and found.replaced_by is None and found.state is not None:
            return found.state
    return None


async def _state_events(backend: Backend, run_id: str) -> list[dict[str, Any]]:
    """The run's logged state events, decoded (others are not parsed)."""
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await retrying(lambda: backend.read_events(run_id, after, PAGE))  # noqa: B023
        out += [orjson.loads(e.data) for e in page if e.type in ("state_snapshot", "state_delta")]
        if len(page) < PAGE:
            return out
        after = page[-1].seq
