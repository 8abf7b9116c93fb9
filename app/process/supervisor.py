"""``agentloop serve --processes N``: N API processes on one port, under a supervisor.

One uvicorn process (an event loop on one core) is what ``agentloop serve`` runs; on a host
with several cores ``--processes N`` runs N of them, each with its own embedded worker, all
serving the same port. This process only supervises: it listens, starts the children
(``app.process.child``), restarts one that dies and stops them all on a signal::

    supervise ─ listen on host:port (a port in use: one error, before any child starts)
      ─ N × child: a fresh interpreter (python -m app.process.child) ─ create_app ─ uvicorn on
        the socket it inherits ─ writes "ready" on its status pipe once it serves
      child exits, not stopping ─ its live gauges dropped ─ restarted (backoff if it keeps
        dying) ─ START_FAILURES children in a row exit before serving: stop all, exit 1
      SIGTERM/SIGINT ─ SIGTERM to every child: each drains as one process does (streams end,
        the worker hands its runs back) ─ all exited: exit 0; one still running after
        ``stop_within``: SIGKILL

Children are new interpreters (``subprocess``), not forks: nothing this process built (event
loop, locks, Redis connections) is shared, which is what multiprocessing's spawn start method
gives, minus its resource-tracker process and the re-import of ``__main__``. Each imports the
code this one imported (``sys.path`` is handed down; ``-P`` prepends nothing) and reads the same
environment and ``.env``.

Metrics: the children share ``prometheus_client``'s multiprocess directory (a fresh temp dir,
``PROMETHEUS_MULTIPROC_DIR``), so ``/metrics`` answered by any of them reports the sum over all
(``app.telemetry.metrics``). A child that exits has its files folded into one set
(``app.telemetry.multiprocess``: restarts do not pile files up); the directory goes when this
process exits, or, if it was killed, when the next supervisor starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

from prometheus_client.multiprocess import mark_process_dead

from app.config import MULTIPROCESS_METRICS, Settings, process_environment
from app.telemetry.logs import setup_logging
from app.telemetry.multiprocess import MetricsDir, fold_exited

log = logging.getLogger(__name__)

RESTART_DELAYS = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Seconds before restarting a child, by how many of its slot's children in a row died
young (the last value repeats): the first restart is at once, a crash loop does not spin."""
STABLE = 60.0
"""A child that served this long before it died counts as a fresh start for the backoff."""
START_FAILURES = 5
"""Children in a row that exit before they serve (a bad configuration, a tool that cannot
load): the supervisor stops the others and exits 1 with the last one's reason."""

# Which socket a child accepts on. A shared socket (one accept queue, every child polling it)
# balances badly: a new connection wakes whichever child the kernel picks first (LIFO under
# epoll), and uvloop then accepts everything queued at once, so a burst of connections (SSE
# streams that stay open for minutes) lands unevenly and stays so: 300 connections to two
# uvloop processes split 63/37 and 56/44 on a shared socket, 53/47 and 51/49 with
# SO_REUSEPORT. With it each child has its own socket on the port and the kernel spreads new
# connections evenly over the listening ones (a hash of the addresses). The price: a busy
# child still gets its share (it accepts them late, where a shared queue would have let an
# idle one take them), and a child's own queue is reset when it dies. So the supervisor binds
# each slot's socket but the child listens on it (uvicorn does, once its app has started):
# connections go only to children that serve, and when one dies its socket is closed at once
# and a new one bound for its successor. Where SO_REUSEPORT does not spread connections (not
# Linux), every child shares one socket.
REUSEPORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def _bind(host: str, port: int, *, reuseport: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuseport:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


class Listeners:
    """The socket of each child slot (one shared socket without SO_REUSEPORT)."""

    def __init__(self, host: str, port: int, count: int) -> None:
        self.host = host
        try:
            # A port another server listens on fails here, once. SO_REUSEPORT would let a
            # second server of the same user join that port silently: a plain bind refuses it.
            first = _bind(host, port, reuseport=False)
            self.port: int = first.getsockname()[1]
            if REUSEPORT:
                first.close()
                first = self._new()
            self._sockets: list[socket.socket | None] = [first]
            self._sockets += [self._new() if REUSEPORT else first for _ in range(count - 1)]
        except OSError as exc:
            raise SystemExit(f"agentloop serve: cannot listen on {host}:{port}: "
                             f"{exc.strerror or exc}") from None

    def _new(self) -> socket.socket:
        return _bind(self.host, self.port, reuseport=True)

    def socket(self, slot: int) -> socket.socket:
        """The slot's socket (a new one after ``drop``)."""
        sock = self._sockets[slot]
        if sock is None:
            sock = self._sockets[slot] = self._new()
        return sock

    def drop(self, slot: int) -> None:
        """The slot's child died: close its socket so new connections go to the others."""
        sock = self._sockets[slot]
        if REUSEPORT and sock is not None:
            sock.close()
            self._sockets[slot] = None

    def close(self) -> None:
        """Stop listening (children close their copies as they shut down)."""
        for sock in self._sockets:
            if sock is not None:
                sock.close()
        self._sockets = [None] * len(self._sockets)


@dataclass
class Child:
    """One child process of a slot."""

    slot: int
    proc: asyncio.subprocess.Process
    status: asyncio.Task[bytes]
    """Its status pipe read to the end: ``R`` once it serves, ``F<reason>`` if it could not."""
    started: float = field(default_factory=time.monotonic)

    @property
    def served(self) -> bool:
        return self.status.done() and not self.status.cancelled() and \
            self.status.result().startswith(b"R")

    def reason(self) -> str:
        """Why it ended before serving, as it said (else its exit status)."""
        said = self.status.result() if self.status.done() and not self.status.cancelled() \
            else b""
        if said.startswith(b"F"):
            return said[1:].decode(errors="replace")
        return exit_status(self.proc.returncode)


def exit_status(code: int | None) -> str:
    """``exit code 3``, ``killed by SIGKILL``."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


async def _read_to_end(fd: int) -> bytes:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    try:
        return await reader.read()
    finally:
        transport.close()


class Supervisor:
    """Keeps ``count`` children serving until a signal (or until they keep failing)."""

    def __init__(self, listeners: Listeners, *, count: int, worker: bool, metrics_dir: str,
                 stop_within: float) -> None:
        self.listeners = listeners
        self.count = count
        self.worker = worker
        self.metrics_dir = metrics_dir
        self.stop_within = stop_within
        self.children: dict[int, Child] = {}
        self.failure: str | None = None
        self.start_failures = 0
        self.stopping = asyncio.Event()
        self.env = process_environment(**{
            MULTIPROCESS_METRICS: metrics_dir,
            "PYTHONPATH": os.pathsep.join(sys.path)})

    async def run(self) -> str | None:
        """Until every child has exited after a stop; the reason when it gave up."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        slots = [asyncio.create_task(self._keep(slot), name=f"slot-{slot}")
                 for slot in range(self.count)]
        for task in slots:
            task.add_done_callback(self._slot_ended)
        await self.stopping.wait()
        self.listeners.close()
        _, pending = await asyncio.wait(slots, timeout=self.stop_within)
        if pending:
            for child in self.children.values():
                log.warning("process %d did not stop within %.0f s: killed", child.proc.pid,
                            self.stop_within)
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
            await asyncio.wait(pending)
        return self.failure

    def _slot_ended(self, task: asyncio.Task[None]) -> None:
        """A slot's task ends only when stopping; if it failed instead, stop everything."""
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("%s failed", task.get_name(), exc_info=exc)
            self.failure = self.failure or f"agentloop serve: supervisor error: {exc!r}"
            self.stopping.set()

    def _on_signal(self, sig: int) -> None:
        if not self.stopping.is_set():
            log.info("%s: stopping %d processes", signal.Signals(sig).name, len(self.children))
            self.stopping.set()
            return
        # asked again: uvicorn's second SIGINT stops waiting for open connections
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGINT)

    async def _keep(self, slot: int) -> None:
        """Run the slot's child, and a new one each time it dies, until stopping."""
        young = 0  # children of this slot in a row that died before STABLE
        while not self.stopping.is_set():
            child = await self._start(slot)
            if child is None:
                served, lived = False, 0.0
            else:
                served, lived = await self._until_exit(child), time.monotonic() - child.started
            if self.stopping.is_set():
                return
            if not served:
                self.start_failures += 1
                if self.start_failures >= START_FAILURES:
                    self._give_up(child)
                    return
            young = young + 1 if not served or lived < STABLE else 0
            delay = RESTART_DELAYS[min(young, len(RESTART_DELAYS)) - 1] if young else 0.0
            if delay:
                log.info("slot %d: restarting in %.0f s", slot, delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), delay)

    async def _start(self, slot: int) -> Child | None:
        try:
            sock = self.listeners.socket(slot)
            read, write = os.pipe()
        except OSError as exc:
            log.error("slot %d: cannot start a process: %s", slot, exc)
            return None
        command = [sys.executable, "-P", "-m", "app.process.child",
                   "--socket-fd", str(sock.fileno()), "--status-fd", str(write),
                   "--parent", str(os.getpid()), *([] if self.worker else ["--no-worker"])]
        try:
            proc = await asyncio.create_subprocess_exec(
                *command, pass_fds=(sock.fileno(), write), env=self.env,
                stdin=asyncio.subprocess.DEVNULL)
        except OSError as exc:
            os.close(read)
            log.error("slot %d: cannot start a process: %s", slot, exc)
            return None
        finally:
            os.close(write)
        child = Child(slot, proc, asyncio.create_task(_read_to_end(read)))
        child.status.add_done_callback(lambda _: self._maybe_serving(child))
        self.children[slot] = child
        log.info("slot %d: process %d starting", slot, proc.pid)
        return child

    def _maybe_serving(self, child: Child) -> None:
        if child.served:
            self.start_failures = 0
            log.info("slot %d: process %d serving", child.slot, child.proc.pid)

    async def _until_exit(self, child: Child) -> bool:
        """Wait for the child to exit (stopping: tell it to first); whether it had served."""
        exited = asyncio.ensure_future(child.proc.wait())
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({exited, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not exited.done():
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        code = await exited
        self.listeners.drop(child.slot)
        await asyncio.wait({child.status}, timeout=5)  # the pipe ends with the process
        child.status.cancel()
        del self.children[child.slot]
        mark_process_dead(child.proc.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        fold_metrics(self.metrics_dir, child.proc.pid)
        if not self.stopping.is_set():
            (log.warning if child.served else log.error)(
                "slot %d: process %d exited (%s) after %.1f s%s", child.slot, child.proc.pid,
                exit_status(code), time.monotonic() - child.started,
                "" if child.served else f" before serving: {child.reason()}")
        return child.served

    def _give_up(self, child: Child | None) -> None:
        reason = child.reason() if child is not None else "it could not be started"
        self.failure = (f"agentloop serve: {self.start_failures} processes in a row exited "
                        f"before serving; the last: {reason}")
        log.error("%s; stopping", self.failure)
        self.stopping.set()


def fold_metrics(metrics_dir: str, pid: int) -> None:
    """Fold an exited child's metric files (``fold_exited``). One the fold cannot read stays
    (counted still, one set more to read) and is logged: metrics never stop the service."""
    try:
        fold_exited(metrics_dir, pid)
    except Exception as exc:
        log.warning("could not fold the metrics of process %d: %r", pid, exc)


def supervise(settings: Settings, *, host: str, port: int, worker: bool, processes: int,
              stop_within: float) -> None:
    """Serve ``host:port`` with ``processes`` children until SIGTERM/SIGINT; exit 1 with the
    reason if they keep failing at start."""
    import uvloop

    setup_logging(settings.log_level, settings.log_format, pid=True)
    listeners = Listeners(host, port, processes)
    metrics = MetricsDir()
    log.info("agentloop serve: %d processes on %s:%d (%s)", processes, host, listeners.port,
             "SO_REUSEPORT" if REUSEPORT else "one shared socket")
    try:
        supervisor = Supervisor(listeners, count=processes, worker=worker,
                                metrics_dir=metrics.path, stop_within=stop_within)
        failure = uvloop.run(supervisor.run())
    finally:
        listeners.close()
        metrics.close()
    if failure:
        raise SystemExit(failure)
    log.info("agentloop serve: every process has exited")
