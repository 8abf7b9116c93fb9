"""What the runner does differently for a run of a thread (two calls in ``app/runner.py``).

A thread's run starts from the thread's history with its own input as prompts (so the new user
messages stream as ``message_start``/``message_end`` and are checkpointed like any prompt);
when it has ended, the thread is settled: what it added joins the history and a message it
never took starts the next run. Settling is idempotent and atomic, so the API (or a thread
event stream) settling first, or again after a crash, changes nothing.
"""

from __future__ import annotations

from app.backends.base import Backend
from app.run_sink import retrying
from app.threads.ids import thread_of_run
from app.threads.store import threads
from providers.messages import Message, load_messages


def is_thread_run(run_id: str) -> bool:
    """Whether the run belongs to a thread."""
    return thread_of_run(run_id) is not None


async def thread_inputs(backend: Backend, run_id: str) -> tuple[list[Message], list[Message]]:
    """``(context, prompts)`` of a thread's run: the history, then its own input."""
    history, prompts = await retrying(lambda: threads(backend).thread_run_inputs(run_id))
    return load_messages(history), load_messages(prompts)


async def settle_thread_of(backend: Backend, run_id: str) -> None:
    """After a thread's run has ended: settle its thread (a no-op for other runs)."""
    thread_id = thread_of_run(run_id)
    if thread_id is not None:
        await retrying(lambda: threads(backend).settle_thread(thread_id))
