"""Runs that keep killing their workers (issue 9): after ``max_attempts`` consecutive worker
deaths without progress the run ends ``failed`` instead of being retried forever.

A worker that dies (``os._exit`` in a tool, a segfault in native code, the OOM killer) cannot
say so; the next worker to claim the run judges the attempt before it from two fields of the
run record: ``progress_mark`` (checkpointed messages when that attempt went live; -1 when it
never did, or handed the run back) and ``lost_attempts``. Progress is the checkpoint growing.

A suspect (a resumed run with a death without progress on record) takes its first step alone
on its worker (one worker-wide lock, held until its checkpoint grows, its loop ends or
``ALONE_FOR`` passes) and only then goes live, so when a suspect's tool kills the process
again, the other suspects waiting for the lock are not blamed: they were not live. Other
resumed runs go live at once (a lease lapsed under load must not queue them). Timeline
(Y kills every worker, X is innocent)::

    worker A ─ X, Y run ─ Y's tool: os._exit ──────────── (both made progress: lost 0)
    worker B ─ X, Y live at once ─ os._exit                (neither progressed: lost 1)
    worker C ─ Y takes the lock, live ─ os._exit           X waited: not blamed (Y: lost 2)
    worker D ─ X takes the lock ─ live ─ progress ─ unlock ─ Y live ─ os._exit (Y: lost 3)
    worker E ─ claim Y: lost_attempts = 3 ≥ max_attempts ─ agent_end (error) ─ failed

so an innocent neighbour is blamed at most once (``max_attempts`` of 2 or more spares it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from app.backends.base import Backend, Claim, RunRecord
from app.run_sink import EventSink, retrying

ALONE_FOR = 30.0
"""Longest a resumed run's first step keeps other resumed runs of its worker waiting (s)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the attempt before this claim ended, as far as the cap is concerned."""

    lost: int
    """Consecutive deaths without progress, that attempt included."""
    checkpointed: int
    """Messages in the checkpoint now."""
    error: str | None
    """Set when the run must end ``failed`` (the cap is reached)."""


def judge(record: RunRecord, checkpointed: int, max_attempts: int) -> Verdict:
    """The verdict on the attempt before this one (``max_attempts`` 0: no cap)."""
    lost = record.lost_attempts
    if record.progress_mark >= 0:  # it was live and never handed the run back: it died
        lost = lost + 1 if checkpointed <= record.progress_mark else 0
    error = None
    if max_attempts and lost >= max_attempts:
        error = (f"the run was stopped after its worker died {lost} times in a row without "
                 "progress (the process exited while driving it: os._exit or a crash in native "
                 "code in a tool, or out of memory); AGENTLOOP_MAX_ATTEMPTS is "
                 f"{max_attempts}")
    return Verdict(lost=lost, checkpointed=checkpointed, error=error)


async def judge_claim(backend: Backend, claim: Claim, record: RunRecord,
                      max_attempts: int) -> Verdict:
    """Judge a resumed claim and record it: not live yet (``progress_mark`` -1)."""
    checkpointed = len(await retrying(lambda: backend.load_checkpoint(claim.run_id)))
    verdict = judge(record, checkpointed, max_attempts)
    await retrying(lambda: backend.update_run(claim.run_id, claim.attempt, progress_mark=-1,
                                              lost_attempts=verdict.lost))
    return verdict


async def go_live(lock: asyncio.Lock | None, backend: Backend, claim: Claim,
                  verdict: Verdict) -> None:
    """Wait for the worker's lock (None: no wait), then mark the attempt live
    (``progress_mark``); the caller releases the lock once ``release_after_first_step`` is
    done."""
    if lock is not None:
        await lock.acquire()
    try:
        await retrying(lambda: backend.update_run(claim.run_id, claim.attempt,
                                                  progress_mark=verdict.checkpointed))
    except BaseException:
        if lock is not None:
            lock.release()
        raise


async def release_after_first_step(sink: EventSink, loop_task: asyncio.Future[Any]) -> None:
    """Return once the checkpoint grew, the loop ended or ``ALONE_FOR`` passed; the caller
    releases the lock when this task is done (or cancelled)."""
    progress = asyncio.ensure_future(sink.progressed.wait())
    try:
        async with asyncio.timeout(ALONE_FOR):
            await asyncio.wait({progress, loop_task}, return_when=asyncio.FIRST_COMPLETED)
    except TimeoutError:
        pass
    finally:
        progress.cancel()
