"""Runs that keep killing their workers (issue 9): after ``max_attempts`` consecutive worker
deaths without progress the run ends ``failed`` instead of being retried forever.

A worker that dies (``os._exit`` in a tool, a segfault in native code, the OOM killer) cannot
say so; the next worker to claim the run judges the attempt before it from two fields of the
run record: ``progress_mark`` (the checkpoint's settled messages when that attempt went live;
-1 when it never did, or handed the run back) and ``lost_attempts``. Progress is a settled
message added: a tool result, or an answer (an assistant message that picks no tool). The user's
input, a steer and a pick are not: the checkpoint is written behind the loop, so a run whose
tool kills every worker can land its input in one attempt and its pick in the next, and each
would otherwise reset its count (a cap of 2 allowed 5 deaths).

Which run killed a worker cannot be known: every run live on it at the time is judged an
attempt without progress. So that an innocent neighbour is not blamed twice, resumed runs pass
a worker-wide ``ResumeGate`` before going live. A suspect (a resumed run with a death without
progress on record) takes its first step alone among resumed runs: it waits for the first steps
of resumed runs already live on the worker, and resumed runs claimed meanwhile wait for it. Its
first step ends when its checkpoint grows past a tool execution (a tool result or a final
answer: a checkpointed pick is not enough, its tool may kill the worker), its loop ends or
``ALONE_FOR`` passes. Resumed runs that are not suspects go live at once unless a suspect is
taking its first step (a lease lapsed under load must not queue them behind each other).
Timeline (Y kills every worker, X is innocent, ``max_attempts`` 3)::

    worker A ─ X, Y fresh ─ Y's tool: os._exit        (Y settled nothing: lost 1; X: 0 or 1)
    worker B ─ X (if not a suspect) live ─ X's first step ─ Y alone ─ os._exit   (Y: lost 2)
    worker C ─ as on B (X still napping there when Y's tool ran)                 (Y: lost 3)
    worker D ─ claim Y: lost_attempts = 3 ≥ max_attempts ─ agent_end (error) ─ failed

A run that settles nothing is a suspect from its first death on, so it goes alone on every
later worker; when X is a suspect too, whichever takes the gate first goes alone, and X is
either not live when Y's tool runs or settles its first step before it::

    worker B ─ X, Y suspects ─ X alone ─ tool result ─ Y alone ─ os._exit   X progressed

so an innocent neighbour resumed with a deadly run is blamed at most once (``max_attempts`` of
2 or more spares it). Runs claimed fresh on a worker are not gated: a deadly run sharing a
worker with a fresh one can cost that one an attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.store.contract import Backend
from app.store.records import Claim, RunRecord
from app.worker.sink import EventSink, retrying

ALONE_FOR = 30.0
"""Longest a resumed run's first step keeps a suspect (or, a suspect's, other resumed runs)
of its worker waiting (s)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the attempt before this claim ended, as far as the cap is concerned."""

    lost: int
    """Consecutive deaths without progress, that attempt included."""
    settled: int
    """Settled messages in the checkpoint now (``settled``)."""
    error: str | None
    """Set when the run must end ``failed`` (the cap is reached)."""


def settled(checkpoint: list[dict[str, Any]]) -> int:
    """The checkpoint's messages past a tool execution: tool results and answers (assistant
    messages that pick no tool), as ``EventSink.settled`` counts them."""
    return sum(1 for message in checkpoint if _past_tools(message))


def _past_tools(message: dict[str, Any]) -> bool:
    role = message.get("role")
    if role == "tool_result":
        return True
    content = message.get("content")
    return role == "assistant" and not (isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_call" for block in content))


def judge(record: RunRecord, settled_now: int, max_attempts: int) -> Verdict:
    """The verdict on the attempt before this one (``max_attempts`` 0: no cap)."""
    lost = record.lost_attempts
    if record.progress_mark >= 0:  # it was live and never handed the run back: it died
        lost = lost + 1 if settled_now <= record.progress_mark else 0
    error = None
    if max_attempts and lost >= max_attempts:
        error = (f"the run was stopped after its worker died {lost} times in a row without "
                 "progress (the process exited while driving it: os._exit or a crash in native "
                 "code in a tool, or out of memory); AGENTLOOP_MAX_ATTEMPTS is "
                 f"{max_attempts}")
    return Verdict(lost=lost, settled=settled_now, error=error)


async def judge_claim(backend: Backend, claim: Claim, record: RunRecord,
                      max_attempts: int) -> Verdict:
    """Judge a resumed claim and record it: not live yet (``progress_mark`` -1)."""
    checkpoint = await retrying(lambda: backend.load_checkpoint(claim.run_id))
    verdict = judge(record, settled(checkpoint), max_attempts)
    await retrying(lambda: backend.update_run(claim.run_id, claim.attempt, progress_mark=-1,
                                              lost_attempts=verdict.lost))
    return verdict


class ResumeGate:
    """One worker's gate for resumed runs going live (see the module docstring)."""

    def __init__(self) -> None:
        self._suspect = False
        """A suspect holds the gate (waiting for first steps to end, or taking its own)."""
        self._first_steps = 0
        """Resumed runs that are not suspects, live and not past their first step."""
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            await self._changed.wait()

    async def enter(self, suspect: bool) -> None:
        """Wait until a resumed run (a ``suspect`` or not) may go live; ``leave`` after its
        first step."""
        await self._until(lambda: not self._suspect)
        if not suspect:
            self._first_steps += 1
            return
        self._suspect = True
        try:
            await self._until(lambda: self._first_steps == 0)
        except BaseException:
            self.leave(suspect=True)
            raise

    def leave(self, suspect: bool) -> None:
        """The first step of a run that ``enter``-ed is over (or it never went live)."""
        if suspect:
            self._suspect = False
        else:
            self._first_steps -= 1
        self._notify()


async def go_live(gate: ResumeGate, backend: Backend, claim: Claim, verdict: Verdict) -> None:
    """Pass the worker's gate, then mark the attempt live (``progress_mark``); the caller
    calls ``gate.leave`` once ``release_after_first_step`` is done."""
    suspect = verdict.lost > 0
    await gate.enter(suspect)
    try:
        await retrying(lambda: backend.update_run(claim.run_id, claim.attempt,
                                                  progress_mark=verdict.settled))
    except BaseException:
        gate.leave(suspect)
        raise


async def release_after_first_step(sink: EventSink, loop_task: asyncio.Future[Any]) -> None:
    """Return once the checkpoint grew past a tool execution (``EventSink.settled``: a
    checkpointed pick is not enough, its tool may kill the process), the loop ended or
    ``ALONE_FOR`` passed; the caller
    leaves the gate when this task is done (or cancelled)."""
    progress = asyncio.ensure_future(sink.settled.wait())
    try:
        async with asyncio.timeout(ALONE_FOR):
            await asyncio.wait({progress, loop_task}, return_when=asyncio.FIRST_COMPLETED)
    except TimeoutError:
        pass
    finally:
        progress.cancel()
