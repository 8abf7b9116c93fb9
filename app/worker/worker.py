"""Workers: claim runs (at most ``concurrency`` at a time), heartbeat, shut down cleanly.

Timeline::

    claim loop ─ slot free? ─ claim(≤1 s) ─ spawn run_claim ─┐ (until stop)
    heartbeat  ─ at start, then every ``heartbeat`` s: heartbeat(worker) — one write per
                 worker, however many runs it holds; another worker takes those runs over
                 once ``lease`` s pass without one
    stop set   ─ claiming stops ─ running loops cancelled ─ each releases its taken messages,
                 flushes its checkpoint and hands the run back (release_run) ─ return

The backend being unreachable never ends the worker: claims and heartbeats log and retry.

``python -m app.worker`` runs one worker process (tests start real ones). Extension hook:
``AGENTLOOP_PROVIDER_FACTORY=module:callable`` names a zero-argument callable returning the
``resolve_provider`` function (``"provider:model"`` → ``(Provider, model_id)``); tests use it
to give a subprocess worker a scripted provider. Other settings: ``AGENTLOOP_REDIS_URL``,
``AGENTLOOP_LEASE_SECONDS`` (5), ``AGENTLOOP_HEARTBEAT_SECONDS`` (1), ``AGENTLOOP_RUN_TTL`` (s),
``AGENTLOOP_WORKER_CONCURRENCY``, ``AGENTLOOP_WORKER_NAME``, ``AGENTLOOP_DISABLED_TOOLS``
(comma-separated), ``AGENTLOOP_MAX_ATTEMPTS`` (worker deaths without progress before a run
fails; ``app.worker.attempts``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from typing import Any

from app.engine.cancelling import raise_if_cancelling
from app.engine.loop_config import ResolveProvider
from app.store import Backend
from app.store.errors import BackendError
from app.store.records import Claim
from app.worker.expiry import wake_expired
from app.worker.runner import RunnerDeps, hand_back_unstarted, run_claim
from app.worker.stranded import redispatch_stranded
from tool_registry import Registry, default_registry

log = logging.getLogger(__name__)
CLAIM_BATCH = 16
"""Most runs taken in one claim (bounded by free slots)."""


def worker_name() -> str:
    """A name unique to this process (host, pid, random suffix)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """One worker: ``run(stop)`` returns after ``stop`` is set and running runs are handed back."""

    def __init__(self, backend: Backend, resolve_provider: ResolveProvider, *,
                 name: str | None = None, concurrency: int = 100, lease: float = 5.0,
                 heartbeat: float | None = None, disabled_tools: Iterable[str] = (),
                 registry: Registry = default_registry, **run_options: Any) -> None:
        """``run_options``: the other ``RunnerDeps`` fields (``env``, ``tool_timeout``,
        ``max_result_chars``, ``flush_interval``)."""
        self.name = name or worker_name()
        self.deps = RunnerDeps(backend=backend, resolve_provider=resolve_provider,
                               worker=self.name, disabled_tools=tuple(disabled_tools),
                               registry=registry, **run_options)
        self.backend = backend
        self.free = concurrency
        """Runs this worker may still take (the concurrency limit minus running and reserved)."""
        self._slot_freed = asyncio.Event()
        self.lease = lease
        self.heartbeat = min(heartbeat or lease / 3, lease / 2)
        self.running: dict[str, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and drive runs until ``stop`` is set, then shut down gracefully."""
        beat = asyncio.create_task(self._heartbeats(stop))
        shutdown = asyncio.create_task(self._shutdown_on(stop))
        expiry = asyncio.create_task(wake_expired(self.backend, stop))
        sweep = asyncio.create_task(redispatch_stranded(self.backend, stop))
        try:
            await self._claim_loop(stop)
        finally:
            stop.set()
            await shutdown
            await expiry
            await sweep
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            while self.free == 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            count = min(self.free, CLAIM_BATCH)
            self.free -= count  # reserved while the claim is out
            try:
                claims = await self._claim(stop, count)
            finally:
                self._give_slots(count)
            for claim in claims:
                if stop.is_set():  # claimed while stopping: hand it straight back
                    with contextlib.suppress(BackendError):
                        await hand_back_unstarted(self.backend, claim)
                else:
                    self.free -= 1
                    self._spawn(claim)

    def _give_slots(self, count: int) -> None:
        if count:
            self.free += count
            self._slot_freed.set()

    async def _claim(self, stop: asyncio.Event, count: int) -> list[Claim]:
        """Claim up to ``count`` runs; a stop interrupts a claim that is still waiting."""
        if stop.is_set():
            return []
        claiming = asyncio.ensure_future(
            self.backend.claim_many(self.name, min(1.0, self.lease / 3), count))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({claiming, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if not claiming.done():
            claiming.cancel()
            with contextlib.suppress(asyncio.CancelledError, BackendError):
                await claiming
            if not claiming.done() or claiming.cancelled():
                return []
        try:
            return claiming.result()
        except BackendError as exc:
            log.warning("worker %s: claim failed (%s)", self.name, exc)
            await asyncio.sleep(0.2)
            return []

    def _spawn(self, claim: Claim) -> None:
        task = asyncio.create_task(run_claim(self.deps, claim), name=f"run-{claim.run_id}")
        self.running[claim.run_id] = task
        task.add_done_callback(lambda t: self._done(claim.run_id, t))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        self.running.pop(run_id, None)
        self._give_slots(1)
        if not task.cancelled() and task.exception() is not None:
            log.error("run %s: runner crashed", run_id, exc_info=task.exception())

    async def _heartbeats(self, stop: asyncio.Event) -> None:
        while True:
            try:
                await self.backend.heartbeat(self.name)
            except BackendError as exc:
                log.warning("worker %s: heartbeat failed (%s)", self.name, exc)
            raise_if_cancelling()  # swallowed by the call: the shutdown waits for this task
            await asyncio.sleep(self.heartbeat)

    async def _shutdown_on(self, stop: asyncio.Event) -> None:
        """On stop, hand running runs back at once (a waiting claim is interrupted too)."""
        await stop.wait()
        await self._shutdown()

    async def _shutdown(self) -> None:
        tasks = list(self.running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_worker(*, backend: Backend, resolve_provider: ResolveProvider,
                     stop: asyncio.Event, **options: Any) -> None:
    """What the CLI and the app lifespan call: one ``Worker`` until ``stop`` is set.
    ``options``: the ``Worker`` keyword arguments."""
    await Worker(backend, resolve_provider, **options).run(stop)
