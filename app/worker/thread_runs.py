"""What the runner does differently for a run of a thread (hooks in ``app/worker/runner.py``).

A thread's run starts from the thread's history with its own input as prompts (so the new user
messages stream as ``message_start``/``message_end`` and are checkpointed like any prompt),
in the thread's workspace (files carry over from turn to turn);
when it has ended, the thread is settled: what it added joins the history and a message it
never took starts the next run. Settling is idempotent and atomic, so the API (or a thread
event stream) settling first, or again after a crash, changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from app.store.contract import Backend
from app.store.ids import is_thread_id, thread_of_run
from app.worker.sink import retrying
from providers.messages import Message, load_messages


def is_thread_run(run_id: str) -> bool:
    """Whether the run belongs to a thread."""
    return thread_of_run(run_id) is not None


async def thread_inputs(backend: Backend, run_id: str) -> tuple[list[Message], list[Message]]:
    """``(context, prompts)`` of a thread's run: the history, then its own input."""
    history, prompts = await retrying(lambda: backend.thread_run_inputs(run_id))
    return load_messages(history), load_messages(prompts)


def thread_workspace(run_id: str) -> Path | None:
    """Where a thread's runs keep their files: one directory per thread
    (``AGENTLOOP_WORKSPACE_ROOT/<thread id>``), so a file written in one turn is there in the
    next; None for a run of no thread, or when every run shares ``AGENTLOOP_WORKSPACE``."""
    from tool_registry.builtin.settings import current

    thread_id = thread_of_run(run_id)
    settings = current()
    if thread_id is None or settings.shared_workspace is not None:
        return None
    return settings.workspace_root / thread_id


async def workspace_gone(backend: Backend, name: str) -> bool:
    """Whether the run (or thread) a workspace directory is named after is no longer stored."""
    if is_thread_id(name):
        return await backend.get_thread(name) is None
    return await backend.get_run(name) is None


async def settle_thread_of(backend: Backend, run_id: str) -> None:
    """After a thread's run has ended: settle its thread (a no-op for other runs)."""
    thread_id = thread_of_run(run_id)
    if thread_id is not None:
        await retrying(lambda: backend.settle_thread(thread_id))
