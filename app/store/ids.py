"""Run, thread and message ids (no imports: the Redis key functions use these too).

A thread is ``thr_<32 hex>``; a run of a thread is ``run_<32 hex>_thr_<32 hex>``: it names its
thread, so its Redis keys can carry the thread's hash tag (one Cluster slot for a thread and
all its runs) and the runner finds the thread from the run id alone.
"""

from __future__ import annotations

import re
import uuid

THREAD_ID = re.compile(r"thr_[0-9a-f]{32}")
_SEP = "_thr_"


def new_thread_id() -> str:
    """A fresh, unguessable thread id."""
    return f"thr_{uuid.uuid4().hex}"


def new_thread_run_id(thread_id: str) -> str:
    """A fresh id for a run of ``thread_id``."""
    return f"run_{uuid.uuid4().hex}_{thread_id}"


def thread_of_run(run_id: str) -> str | None:
    """The thread a run belongs to (None for a run of no thread)."""
    head, sep, tail = run_id.partition(_SEP)
    if not sep or not head.startswith("run_"):
        return None
    thread_id = "thr_" + tail
    return thread_id if THREAD_ID.fullmatch(thread_id) else None


def is_thread_id(value: str) -> bool:
    """Whether ``value`` can be a thread id (anything else is 404 before the store is asked)."""
    return bool(THREAD_ID.fullmatch(value))


RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""What a run id can look like (``new_run_id`` makes ``run_<32 hex>``); anything else is 404
before the store is asked (``../``, unicode, 8 KiB ids never become store keys)."""


def new_run_id() -> str:
    """A fresh, unguessable run id."""
    return f"run_{uuid.uuid4().hex}"


def new_message_id() -> str:
    """A fresh id for a queued (or posted) user message."""
    return f"msg_{uuid.uuid4().hex}"
