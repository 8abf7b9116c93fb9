"""Workers: claim runs (at most ``concurrency`` at a time), heartbeat them, shut down cleanly.

Timeline::

    claim loop ─ slot free? ─ claim(≤1 s) ─ spawn run_claim ─┐ (until stop)
    heartbeat  ─ every lease/3: heartbeat(worker, running run ids)
    stop set   ─ claiming stops ─ running loops cancelled ─ each releases its taken messages,
                 flushes its checkpoint and hands the run back (release_run) ─ return

The backend being unreachable never ends the worker: claims and heartbeats log and retry.

``python -m app.worker`` runs one worker process (tests start real ones). Extension hook:
``AGENTLOOP_PROVIDER_FACTORY=module:callable`` names a zero-argument callable returning the
``resolve_provider`` function (``"provider:model"`` → ``(Provider, model_id)``); tests use it
to give a subprocess worker a scripted provider. Other settings: ``AGENTLOOP_REDIS_URL``,
``AGENTLOOP_LEASE`` (s), ``AGENTLOOP_RUN_TTL`` (s), ``AGENTLOOP_WORKER_CONCURRENCY``,
``AGENTLOOP_WORKER_NAME``, ``AGENTLOOP_DISABLED_TOOLS`` (comma-separated).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import socket
import uuid
from collections.abc import Iterable
from typing import Any

from app.backends import Backend, make_backend
from app.backends.base import BackendError, Claim
from app.runner import ResolveProvider, RunnerDeps, run_claim
from tool_registry import Registry, default_registry

log = logging.getLogger(__name__)


def worker_name() -> str:
    """A name unique to this process (host, pid, random suffix)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """One worker: ``run(stop)`` returns after ``stop`` is set and running runs are handed back."""

    def __init__(self, backend: Backend, resolve_provider: ResolveProvider, *,
                 name: str | None = None, concurrency: int = 100, lease: float = 30.0,
                 disabled_tools: Iterable[str] = (), registry: Registry = default_registry
                 ) -> None:
        self.name = name or worker_name()
        self.deps = RunnerDeps(backend=backend, resolve_provider=resolve_provider,
                               worker=self.name, disabled_tools=tuple(disabled_tools),
                               registry=registry)
        self.backend = backend
        self.slots = asyncio.Semaphore(concurrency)
        self.lease = lease
        self.running: dict[str, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and drive runs until ``stop`` is set, then shut down gracefully."""
        beat = asyncio.create_task(self._heartbeats(stop))
        shutdown = asyncio.create_task(self._shutdown_on(stop))
        try:
            await self._claim_loop(stop)
        finally:
            stop.set()
            await shutdown
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    async def _claim_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.slots.acquire()
            try:
                claim = await self._claim(stop)
            except BaseException:
                self.slots.release()
                raise
            if claim is None:
                self.slots.release()
            elif stop.is_set():  # claimed while stopping: hand it straight back
                self.slots.release()
                with contextlib.suppress(BackendError):
                    await self.backend.release_run(claim.run_id, claim.attempt)
            else:
                self._spawn(claim)

    async def _claim(self, stop: asyncio.Event) -> Claim | None:
        if stop.is_set():
            return None
        try:
            return await self.backend.claim(self.name, timeout=min(1.0, self.lease / 3))
        except BackendError as exc:
            log.warning("worker %s: claim failed (%s)", self.name, exc)
            await asyncio.sleep(0.2)
            return None

    def _spawn(self, claim: Claim) -> None:
        task = asyncio.create_task(run_claim(self.deps, claim), name=f"run-{claim.run_id}")
        self.running[claim.run_id] = task
        task.add_done_callback(lambda t: self._done(claim.run_id, t))

    def _done(self, run_id: str, task: asyncio.Task[None]) -> None:
        self.running.pop(run_id, None)
        self.slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("run %s: runner crashed", run_id, exc_info=task.exception())

    async def _heartbeats(self, stop: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            if not self.running:
                continue
            try:
                await self.backend.heartbeat(self.name, list(self.running))
            except BackendError as exc:
                log.warning("worker %s: heartbeat failed (%s)", self.name, exc)

    async def _shutdown_on(self, stop: asyncio.Event) -> None:
        """On stop, hand running runs back at once (a pending claim may still take ≤ 1 s)."""
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
    ``options``: ``name``, ``concurrency``, ``lease``, ``disabled_tools``, ``registry``."""
    await Worker(backend, resolve_provider, **options).run(stop)


def load_factory(spec: str) -> ResolveProvider:
    """``module:callable`` → the ``resolve_provider`` the callable returns."""
    module, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    resolve: ResolveProvider = factory()
    return resolve


async def _main() -> None:
    env = os.environ
    lease = float(env.get("AGENTLOOP_LEASE", "30"))
    name = env.get("AGENTLOOP_WORKER_NAME") or worker_name()
    backend = make_backend(env.get("AGENTLOOP_REDIS_URL"), lease=lease, client_name=name,
                           run_ttl=float(env.get("AGENTLOOP_RUN_TTL", str(7 * 86400))))
    factory = env.get("AGENTLOOP_PROVIDER_FACTORY")
    if not factory:
        raise SystemExit("AGENTLOOP_PROVIDER_FACTORY=module:callable is required")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await _start(backend, stop)
    disabled = [t for t in env.get("AGENTLOOP_DISABLED_TOOLS", "").split(",") if t]
    try:
        await run_worker(backend=backend, resolve_provider=load_factory(factory), stop=stop,
                         name=name, lease=lease,
                         concurrency=int(env.get("AGENTLOOP_WORKER_CONCURRENCY", "100")),
                         disabled_tools=disabled)
    finally:
        await backend.close()


async def _start(backend: Backend, stop: asyncio.Event) -> None:
    """Connect, waiting for the store if it is not up yet."""
    while not stop.is_set():
        try:
            await backend.start()
            return
        except BackendError as exc:
            log.warning("backend not reachable (%s); retrying", exc)
            await asyncio.sleep(0.5)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(_main())
