"""The runner's event sink: the loop's sync ``emit`` in, batched fenced writes out.

``emit`` only appends to a buffer (no I/O per event, per delta). One writer task per run
takes everything buffered since its last write and sends it as one ``EventBatch``: the events
(seqs allocated by the backend), the checkpoint messages of depth-0 ``message_end``s among them
and the queue acks registered since, so log, checkpoint and queues change together.

Timeline (Redis down for a while)::

    loop ─ emit emit emit ─────────── emit emit ───────── (never blocks)
    writer ─ write ✗ ─ sleep ─ write ✗ ─ sleep ─ write ✓ (same batch, same token) ─ next batch

``flush_interval``: while a run streams fast the writer task's writes are spaced at least this
far apart, so events accumulate into fewer, larger batches (one store round trip and one
subscriber wake-up each); the first event after a quiet spell is written at once, and so is
everything when the run closes or is fenced out::

    emit ─┬─ emit emit emit emit ─┬─ emit emit ─────────── emit
    write ┴(at once)   ≥interval ─┴ write (4 events) ───── write (at once: quiet before)

A backend whose writes never wait (``append_now``: the in-process one) is written without the
writer task: ``emit`` schedules one callback for the end of the loop's current step, which takes
everything buffered by then (so a ``message_end`` and the acks registered right after it still
share a batch) and writes it in place, one task wake-up fewer per frame. A backend that answers
later but can send without a coroutine (``append_soon``: Redis on its lean connection) is
written from that callback too; one such write is out at a time, and its answer (a callback,
no task) sends what was emitted meanwhile::

    emit ─ end of step: send batch 1 ─ emit emit ─ answer 1: send batch 2 (both) ─ answer 2

(On Redis the backend may hold a batch sent so a while longer, up to the same interval, to
share one write with other runs' batches: ``redis_lean_scripts``' window.)

While streaming fast (the last write answered less than ``flush_interval`` ago) the writer
task takes over and spaces the writes. Anything else (the run ending, fenced out, a failed
write: retried by the writer, same batch) goes to the writer task, which first waits for the
write that is out, as do all writes while it is busy, so batches keep their order.

A retried batch carries the same ``token``, so a write whose reply was lost is not applied
twice. ``FencedOut`` ends the writer: the run belongs to another worker now. The depth-0
``agent_end`` waits for ``close`` and goes out in one batch with the run's final fields
(status, result, usage; ``end_fields`` at least), so the status turns terminal atomically with
it and the store takes no event after it (``RunEnded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeGuard, TypeVar

from app.engine.events import Event, encode_event_body, json_bytes
from app.engine.queues import QueuedMessage, QueueKind, QueueMode
from app.store.contract import Backend
from app.store.errors import BackendError, FencedOut, RunEnded
from app.store.records import EventBatch
from app.telemetry import metrics
from app.telemetry.metrics import RunTimings
from app.telemetry.trace_seam import Trace

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_MAX = 1.0
REPORT_EVERY = 1.0
"""Seconds between a streaming run's updates of the events-written counter."""


class AppendsNow(Protocol):
    """A backend that applies a batch without waiting (``append_events`` without the await)."""

    def append_now(self, run_id: str, attempt: int | None, batch: EventBatch) -> int: ...


class AppendsSoon(Protocol):
    """A backend that sends a batch without a coroutine and calls ``done(last_seq, None)`` or
    ``done(0, error)`` when the store answers; the future it returns (None: it cannot send
    so now) is settled right after that call."""

    def append_soon(self, run_id: str, attempt: int | None, batch: EventBatch,
                    done: Callable[[int, BaseException | None], None]
                    ) -> asyncio.Future[Any] | None: ...


class EventSink:
    """Buffers one run's events and writes them in order (see the module docstring)."""

    def __init__(self, backend: Backend, run_id: str, attempt: int, *,
                 flush_interval: float = 0.0, timings: RunTimings | None = None,
                 trace: Trace | None = None) -> None:
        self.backend = backend
        self.flush_interval = flush_interval
        self.timings = timings
        self.trace = trace
        """The attempt's spans (``AGENTLOOP_OTEL``): each event is shown to it."""
        self.run_id = run_id
        self.attempt = attempt
        self._buf: list[tuple[Event, float, bool]] = []
        self._acks: list[tuple[QueueKind, str]] = []
        self._fields: dict[str, Any] = {}
        self._wake = asyncio.Event()
        self._hurry = asyncio.Event()
        """Set by ``close`` and ``fenced_out``: the writer waits out no flush interval."""
        self._closing = False
        self._fenced = False
        self._batches = 0
        self.last_seq = 0
        self.written = 0
        self.progressed = asyncio.Event()
        """Set once a batch with checkpoint messages was written (``app.worker.attempts``)."""
        self.settled = asyncio.Event()
        """Set once a checkpointed message past a tool execution was written: a tool result
        or an assistant message that picks no tool (a checkpointed pick is progress, but the
        tool it picks may still kill the process: ``app.worker.attempts``' first step lasts past
        it)."""
        self._settling: set[str] = set()
        self._now: Callable[[str, int | None, EventBatch], int] | None = (
            backend.append_now if _appends_now(backend) else None)
        self._soon_backend: AppendsSoon | None = (
            backend if self._now is None and _appends_soon(backend) else None)
        self._inflight: asyncio.Future[Any] | None = None
        """The in-place write on its way (``append_soon``): the next waits for its reply."""
        self._out: asyncio.Future[int] | None = None
        """The writer's last store write (a task of its own: ``stop`` waits for it)."""
        self._last_write = -float("inf")
        """When the last write (in place or by the writer) was answered (loop time)."""
        self._soon: asyncio.Handle | None = None
        self._loop = asyncio.get_running_loop()
        """Kept: ``asyncio.get_running_loop()`` checks the pid (a ``getpid`` syscall on
        Python 3.11), which per event showed at ~2 % of a streaming server's samples."""
        self._writing = False
        """The writer task is writing: everything else waits for it (order)."""
        self._failed: BaseException | None = None
        self._retry: EventBatch | None = None
        self._stopped = False
        self._unreported = 0
        """Events written since ``EVENTS_WRITTEN`` last counted them (it is counted at most
        every ``REPORT_EVERY`` s while streaming, and at the end: not once per frame)."""
        self._report_at = 0.0
        self.task: asyncio.Task[None] = asyncio.create_task(self._writer(),
                                                            name=f"sink-{run_id}")

    def emit(self, event: Event, *, checkpoint: bool = True) -> None:
        """The loop's ``emit``: buffer and wake the writer (cheap: no I/O here).
        ``checkpoint=False``: a depth-0 ``message_end`` that is not part of the history (an
        end closing a reply a lost worker left open)."""
        t = time.time()
        self._buf.append((event, t, checkpoint))
        if self.timings is not None:
            self.timings.observe(event, t)
        if self.trace is not None:
            self.trace.observe(event, t)
        self._kick()

    def ack(self, kind: QueueKind, items: list[QueuedMessage]) -> None:
        """Acknowledge injected queue messages with the batch holding their ``message_end``
        (the loop acks right after emitting them, with no await in between)."""
        self._acks.extend((kind, q.id) for q in items)
        self._kick()

    def set_fields(self, **fields: Any) -> None:
        """Run-record fields to write with the next batch."""
        self._fields.update(fields)
        self._kick()

    def fenced_out(self) -> None:
        """Another call learnt the run was taken over: stop writing (the runner then stops
        the loop)."""
        self._fenced = True
        self._hurry.set()
        self._wake.set()

    async def stop(self) -> None:
        """Write nothing more (its runner crashed): the writer is cancelled, what is buffered
        or emitted later is dropped, and a write already out (in place, or the writer's:
        cancelling its caller does not take back a command a pipeline has sent) is waited
        for, so nothing of this sink lands after this returns."""
        self._stopped = True
        if not self.task.done():
            self.task.cancel()
        await self._after_inflight()
        if self._out is not None:
            await asyncio.wait([self._out])
        self.report_written()

    async def close(self, **final: Any) -> None:
        """Write everything still buffered (with ``final`` fields) and stop the writer.
        Raises ``FencedOut`` if the run was taken over."""
        self._fields.update(final)
        self._closing = True
        self._hurry.set()
        self._wake.set()
        try:
            await self.task
        finally:
            self.report_written()

    def _kick(self) -> None:
        """Have what is buffered written: in place at the end of this loop step when the
        backend allows it and the writer is idle, else by the writer task."""
        if (self._now is not None or self._soon_backend is not None) and not self._writing:
            if self._soon is None and self._inflight is None:  # else its reply writes it
                self._soon = self._loop.call_soon(self._write_now)
        elif not self._wake.is_set():
            self._wake.set()

    def _write_now(self) -> None:
        """The in-place write (see the module docstring); anything unusual goes to the writer."""
        self._soon = None
        if self._stopped or self.task.done():
            return  # the run stopped (cancelled, fenced out): nothing more is written
        if (self._fenced or self._closing or self._writing or self._failed is not None
                or self._retry is not None or self._ending()):
            self._wake.set()
            return
        if self._inflight is not None or not (self._buf or self._acks or self._fields):
            return
        if self._now is None:
            if self._loop.time() - self._last_write < self.flush_interval:
                self._wake.set()  # streaming fast: the writer spaces the writes
                return
            self._send_now(self._take_batch())
            return
        batch = self._take_batch()
        try:
            self.last_seq = self._now(self.run_id, self.attempt, batch)
        except (FencedOut, RunEnded) as exc:
            self._failed = exc
        except BackendError:
            self._retry = batch  # the writer retries it (same token) before anything newer
        except Exception as exc:  # the writer task fails with it, as it would have written it
            self._failed = exc
        else:
            self._wrote(batch)
            return
        self._wake.set()

    def _send_now(self, batch: EventBatch) -> None:
        """The in-place write to a backend that answers later (``append_soon``): no task
        wakes for it; its answer sends what was emitted meanwhile."""
        assert self._soon_backend is not None
        self._inflight = self._soon_backend.append_soon(
            self.run_id, self.attempt, batch, functools.partial(self._sent, batch))
        if self._inflight is None:  # the backend cannot (not on its lean connection): the
            self._soon_backend = None  # writer writes this batch and every later one
            self._retry = batch
            self._wake.set()

    def _sent(self, batch: EventBatch, last_seq: int, error: BaseException | None) -> None:
        self._inflight = None
        if error is None:
            self.last_seq = last_seq
            self._last_write = self._loop.time()
            self._wrote(batch)
            if self._buf or self._acks or self._fields:
                self._kick()
            return
        if isinstance(error, BackendError) and not isinstance(error, FencedOut | RunEnded):
            self._retry = batch  # the writer retries it (same token) before anything newer
        else:
            self._failed = error
        self._wake.set()

    async def _writer(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            await self._after_inflight()
            gap = self.flush_interval - (loop.time() - self._last_write)
            if gap > 0 and not self._hurry.is_set():
                # streaming fast: let this batch gather more events (close and fencing cut
                # the wait short)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(gap):
                        await self._hurry.wait()
                await self._after_inflight()  # one may have gone out in place meanwhile
            self._wake.clear()
            if self._failed is not None:
                raise self._failed
            if self._retry is not None:
                batch, self._retry = self._retry, None
                await self._write_alone(batch)
            if self._fenced:
                raise FencedOut(f"run {self.run_id}: attempt {self.attempt} is stale")
            if self._ending() and not self._closing:
                continue  # agent_end waits for close(): the run's final fields go with it
            if self._buf or self._acks or self._fields:
                await self._write_alone(self._take_batch())
                self._last_write = loop.time()
            if self._closing and not (self._buf or self._acks or self._fields):
                return

    async def _after_inflight(self) -> None:
        """Wait for the in-place write that is out, if any: batches keep their order."""
        while self._inflight is not None:
            await asyncio.wait([self._inflight])

    def _ending(self) -> bool:
        last = self._buf[-1][0] if self._buf else None
        return last is not None and last.type == "agent_end" and last.depth == 0

    def _take_batch(self) -> EventBatch:
        events, self._buf = self._buf, []
        acks, self._acks = self._acks, []
        fields, self._fields = self._fields, {}
        encoded: list[tuple[str, bytes]] = []
        checkpoint: list[bytes] = []
        settles = False
        for event, t, keep in events:
            encoded.append((event.type, encode_event_body(event, run_id=self.run_id,
                                                          ts=rfc3339_ms(t))))
            if event.type == "message_end" and event.depth == 0 and keep:
                checkpoint.append(json_bytes(event.message))
                if _past_tools(event.message):
                    settles = True
            elif event.type == "agent_end" and event.depth == 0:
                fields = {**end_fields(event.stop_reason, event.error, t), **fields}
        self._batches += 1
        token = f"{self.attempt}:{self._batches}"
        if settles:
            self._settling.add(token)
        return EventBatch(events=encoded, checkpoint=checkpoint, acks=acks,
                          fields=fields or None, token=token)

    async def _write_alone(self, batch: EventBatch) -> None:
        """``_write`` with in-place writes held off meanwhile (they would overtake it)."""
        self._writing = True
        try:
            await self._write(batch)
        finally:
            self._writing = False

    def _wrote(self, batch: EventBatch) -> None:
        self.written += len(batch.events)
        if batch.checkpoint:
            self.progressed.set()
        if batch.token in self._settling:
            self._settling.discard(batch.token)
            self.settled.set()
        self._unreported += len(batch.events)
        if self._loop.time() >= self._report_at:
            self.report_written()

    def report_written(self) -> None:
        """Count the events written since the last report in ``EVENTS_WRITTEN``."""
        if self._unreported:
            metrics.EVENTS_WRITTEN.inc(self._unreported)
            self._unreported = 0
        self._report_at = self._loop.time() + REPORT_EVERY

    async def _write(self, batch: EventBatch) -> None:
        delay = 0.05
        while True:
            try:
                self._out = asyncio.ensure_future(
                    self.backend.append_events(self.run_id, self.attempt, batch))
                self._out.add_done_callback(_seen)  # its writer may be gone (stop, cancel)
                self.last_seq = await asyncio.shield(self._out)
                self._wrote(batch)
                return
            except (FencedOut, RunEnded):
                raise
            except BackendError as exc:
                log.warning("run %s: event write failed (%s); retrying in %.2fs",
                            self.run_id, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)


def _seen(write: asyncio.Future[Any]) -> None:
    """A write's failure marked retrieved: the writer that awaited it gets it, or is gone."""
    if not write.cancelled():
        write.exception()


def _past_tools(message: Any) -> bool:
    """A tool result, or an assistant message that picks no tool (nothing runs after it)."""
    if message.role == "tool_result":
        return True
    return message.role == "assistant" and not any(
        getattr(block, "type", None) == "tool_call" for block in message.content)


def _appends_now(backend: Backend) -> TypeGuard[AppendsNow]:
    return callable(getattr(backend, "append_now", None))


def _appends_soon(backend: Backend) -> TypeGuard[AppendsSoon]:
    return callable(getattr(backend, "append_soon", None))


STATUS = {"stop": "completed", "max_iterations": "completed", "error": "failed",
          "output_invalid": "failed", "aborted": "cancelled", "budget": "completed"}
"""A run's final status by the ``stop_reason`` of its ``agent_end``."""


def end_fields(stop_reason: str, error: str | None, t: float) -> dict[str, Any]:
    """The run-record fields written in the same batch as the run's ``agent_end``: the status
    turns terminal atomically with it, so the store refuses any later event or message."""
    return {"status": STATUS[stop_reason], "stop_reason": stop_reason, "error": error,
            "ended_at": t}


_SECOND: list[Any] = [-1, ""]
"""The last whole second formatted, shared by every run's sink (frames 33 ms apart in one run
always missed a per-run, per-millisecond cache)."""


def rfc3339_ms(t: float) -> str:
    """``t`` (epoch seconds) as ``2026-01-02T03:04:05.678Z``, the ``ts`` of stored events."""
    ms = int(t * 1000)
    second, millis = divmod(ms, 1000)
    if second != _SECOND[0]:
        _SECOND[0] = second
        _SECOND[1] = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{_SECOND[1]}.{millis:03d}Z"


class BackendQueue:
    """A ``MessageSource`` over one of the run's backend queues (retrying while the store is
    down); acks ride on the sink's next batch."""

    def __init__(self, sink: EventSink, kind: QueueKind) -> None:
        self.sink = sink
        self.kind = kind

    async def take(self, mode: QueueMode) -> list[QueuedMessage]:
        """See ``MessageSource.take`` (fenced by the run's attempt). Every retry of one take
        carries the same token: a take applied in the store whose reply was lost (a failover)
        answers the same messages again instead of leaving them in flight, unseen."""
        s = self.sink
        token = secrets.token_hex(8)  # unique per take, whatever queue object or attempt
        try:
            return await retrying(lambda: s.backend.take(s.run_id, self.kind, mode, s.attempt,
                                                         token))
        except FencedOut:
            s.fenced_out()
            return []

    async def ack(self, taken: list[QueuedMessage]) -> None:
        """See ``MessageSource.ack``."""
        self.sink.ack(self.kind, taken)

    async def release(self, taken: list[QueuedMessage]) -> None:
        """See ``MessageSource.release``."""
        s = self.sink
        await retrying(lambda: s.backend.release(s.run_id, self.kind, taken))
        metrics.QUEUE_DEPTH.labels(kind=self.kind).inc(len(taken))


class QueueCloser:
    """The loop's ``close_queues`` over the backend (fenced by the run's attempt)."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink

    async def __call__(self) -> bool:
        s = self.sink
        try:
            return await retrying(lambda: s.backend.close_queues(s.run_id, s.attempt))
        except FencedOut:
            s.fenced_out()
            return True


async def retrying(call: Callable[[], Awaitable[T]], *, attempts: int = 40) -> T:
    """Await ``call()`` again (backoff up to 1 s) while the store is unreachable; ``FencedOut``
    and the last failure propagate."""
    delay = 0.05
    for n in range(attempts):
        try:
            return await call()
        except FencedOut:
            raise
        except BackendError as exc:
            if n == attempts - 1:
                raise
            log.warning("backend call failed (%s); retrying in %.2fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
    raise AssertionError("unreachable")
