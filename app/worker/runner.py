"""Drives one claimed run: the loop built from ``record.request``, its events and checkpoints
written through the backend (``run_sink``), cancel and takeover handled.

Timeline of one run::

    claim ─ get_run ─ [lost attempt's open starts ended, run_resumed] ─ loop ──emit──▶ sink
                                        abort ◀── wait_cancel (pub/sub note, < 100 ms) ─┘  │
                                                                 backend ◀── batches ──────┘
                       agent_end ─ close(final fields in the same batch) ─ finish (TTL, ack job)

``status``: queued → running → completed (stop, max_iterations, budget) | failed (error,
output_invalid) | cancelled (aborted). A stale runner (``FencedOut``) stops quietly: another
worker owns the run.
A runner cancelled from outside (graceful shutdown) lets the loop release taken queue messages,
flushes the last checkpoint and hands the run back (``release_run``), then re-raises. A resumed
run reads its whole log first (``app.engine.resume``): what was left open gets its end, the loop
goes on from the open turn with the rounds already made, and a run whose ``agent_end`` was written
is only closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from app.engine import LoopConfig, LoopOutcome, Resume, run_loop
from app.engine.cancelling import raise_if_cancelling
from app.engine.events import AgentEnd, RunResumed
from app.engine.loop_config import ResolveProvider
from app.engine.output import format_from_option
from app.engine.resume import LogState, ended_fields, read_log_state
from app.engine.streaming import Deadline
from app.store.contract import Backend
from app.store.errors import BackendError, FencedOut, RunEnded
from app.store.records import TERMINAL, Claim, ParkedState, RunRecord, now
from app.telemetry import metrics
from app.telemetry.logs import bind
from app.telemetry.metrics import RunTimings
from app.telemetry.trace_seam import RunSpan, Trace, Tracing
from app.worker import parking
from app.worker.attempts import ResumeGate, Verdict, go_live, judge_claim, release_after_first_step
from app.worker.run_end import after_end
from app.worker.run_servers import open_run_servers
from app.worker.run_state import run_state
from app.worker.sink import STATUS, BackendQueue, EventSink, QueueCloser, retrying
from app.worker.thread_runs import is_thread_run, settle_thread_of, thread_inputs, thread_workspace
from app.worker.webhooks import queue_webhook
from providers.base import ForcedTool, ToolChoice
from providers.messages import Message, Usage, UserMessage, load_messages
from tool_registry import Registry, build_menu, default_registry

log = logging.getLogger(__name__)



@dataclass(slots=True, kw_only=True)
class RunnerDeps:
    """What every run needs from its worker."""

    backend: Backend
    resolve_provider: ResolveProvider
    worker: str
    disabled_tools: Iterable[str] = ()
    registry: Registry = default_registry
    env: Mapping[str, str] | None = None
    """What ``requires_env`` tools are checked against (the service's environment snapshot)."""
    tool_timeout: float = 120.0
    max_result_chars: int = 32_000
    flush_interval: float = 0.0
    """Least seconds between two event writes of one run (see ``run_sink``)."""
    fetch_allow_private: bool = False
    """A run's own MCP servers may be at loopback and private addresses."""
    run_timeout: float = 0.0
    """Seconds a run may take from its start (``AGENTLOOP_RUN_TIMEOUT``; 0: no deadline)."""
    default_max_tokens: int = 0
    """``max_tokens`` of model calls whose run sets none (0: send none)."""
    max_attempts: int = 3
    """Consecutive worker deaths without progress before a run ends ``failed``
    (``AGENTLOOP_MAX_ATTEMPTS``; 0: no cap)."""
    tracing: Tracing | None = None
    """Spans of every attempt (``app.telemetry.traces``; None: ``AGENTLOOP_OTEL`` is off)."""
    resume_gate: ResumeGate = field(default_factory=ResumeGate)
    """Suspects take their first step alone among resumed runs on a worker
    (``app.worker.attempts``)."""


async def run_claim(deps: RunnerDeps, claim: Claim) -> None:
    """Drive the claimed run to its end (or until fenced out / cancelled from outside). Every
    log line about it, from here and from the tasks it starts, carries its run_id and tenant."""
    with bind(run_id=claim.run_id):
        try:
            record = claim.record or await retrying(lambda: deps.backend.get_run(claim.run_id))
        except asyncio.CancelledError:  # stopped before anything: not a death either
            with contextlib.suppress(BackendError):
                await hand_back_unstarted(deps.backend, claim)
            raise
        if record is None:
            return
        with bind(tenant=record.tenant):
            try:
                await _run_record(deps, claim, record)
            except Exception:
                log.exception("run %s: runner crashed", claim.run_id)


async def hand_back_unstarted(backend: Backend, claim: Claim) -> None:
    """Release a run this worker never started; ``progress_mark`` -1 says so, or the next
    claimer would count this attempt as a death (``app.worker.attempts``)."""
    await backend.update_run(claim.run_id, claim.attempt, progress_mark=-1)
    await backend.release_run(claim.run_id, claim.attempt)


async def _run_record(deps: RunnerDeps, claim: Claim, record: RunRecord) -> None:
    if claim.resumed:
        log.info("run %s: resuming attempt %d on worker %s", claim.run_id, claim.attempt,
                 deps.worker)
    if record.status in TERMINAL:
        await _finish(deps, claim)
        return
    provider_name = str(record.request.get("model") or record.model).split(":", 1)[0]
    trace = _start_trace(deps.tracing, claim, record)
    sink = EventSink(deps.backend, claim.run_id, claim.attempt, trace=trace,
                     flush_interval=deps.flush_interval, timings=RunTimings(provider_name))
    if trace is not None and record.traceparent is None:  # later attempts join its trace
        sink.set_fields(traceparent=trace.traceparent)
    metrics.ACTIVE_RUNS.inc()
    crashed: str | None = None
    parked = False
    try:
        parked = await _drive(deps, claim, record, sink)
    except FencedOut:
        log.info("run %s: attempt %d fenced out; another worker owns it", claim.run_id,
                 claim.attempt)
    except RunEnded:
        log.info("run %s: already ended; attempt %d stops", claim.run_id, claim.attempt)
    except Exception as exc:
        log.exception("run %s: runner crashed", claim.run_id)
        crashed = type(exc).__name__
        await _end_after_crash(deps, claim, sink, exc)
    finally:
        if trace is not None:
            trace.end(parked=parked, error=crashed)
        metrics.ACTIVE_RUNS.dec()
        sink.report_written()
        if not sink.task.done():
            sink.task.cancel()


@dataclass(slots=True)
class _Setup:
    """What an attempt's setup found: ``earlier`` ended (only its close was lost), ``error``
    (the run cannot start: it fails), or ``kwargs`` for its loop."""

    woken: ParkedState | None
    earlier: LogState | None
    verdict: Verdict | None = None
    kwargs: dict[str, Any] | None = None
    error: str | None = None

    @property
    def ended(self) -> dict[str, Any] | None:
        """The ``agent_end`` an earlier attempt wrote, if one ended the run."""
        return self.earlier.ended if self.earlier is not None else None


async def _drive(deps: RunnerDeps, claim: Claim, record: RunRecord, sink: EventSink) -> bool:
    """Drive the attempt to its end: True when it parked (it waits for people). A shutdown's
    cancel while it sets up hands the run back, as one during the loop does (else the run
    would wait out its lease, and its next claimer count this attempt as a death); so does
    one a store call swallowed (``app.engine.cancelling``), seen before the loop starts."""
    try:
        setup = await _set_up(deps, claim, record, sink)
        servers = None
        if setup.kwargs is not None:
            servers = await open_run_servers(record.request, setup.kwargs["menu"],
                                             allow_private=deps.fetch_allow_private,
                                             disabled=deps.disabled_tools)
    except asyncio.CancelledError:
        await _hand_back(deps.backend, claim, None, sink)
        raise
    if setup.ended is not None:
        await sink.close(**_final(*ended_fields(setup.ended)))
        await _finish(deps, claim)
        return False
    if servers is None or setup.kwargs is None:
        await _end_at_start(deps, claim, sink, str(setup.error))
        return False
    try:  # a cancel their connecting swallowed is seen in _drive_loop, which this closes
        return await _drive_loop(deps, claim, record, sink, setup.kwargs, setup.woken,
                                 setup.verdict)
    finally:
        await servers.close()


async def _set_up(deps: RunnerDeps, claim: Claim, record: RunRecord, sink: EventSink
                  ) -> _Setup:
    """Everything before the run's own MCP servers and its loop (see ``_Setup``)."""
    woken = await parking.woken(deps.backend, record, claim)
    setup = _Setup(woken, await _earlier_attempts(deps, claim, sink, lost=woken is None))
    if setup.ended is not None:
        return setup
    if woken is not None:
        parking.count_wait(record, woken, sink)
    if claim.resumed:  # a woken parked run checkpointed its picks first: never blamed
        setup.verdict = verdict = await judge_claim(deps.backend, claim, record,
                                                    deps.max_attempts)
        if verdict.lost:
            log.info("run %s: attempt %d: its worker died %d time(s) in a row without progress "
                     "(settled messages: %d)", claim.run_id, claim.attempt, verdict.lost,
                     verdict.settled)
    raise_if_cancelling()  # before the status says running (a woken run stays ``queued``)
    sink.set_fields(status="running", started_at=record.started_at or now(), worker=deps.worker)
    if setup.verdict is not None and setup.verdict.error is not None:
        log.warning("run %s: %s", claim.run_id, setup.verdict.error)
        setup.error = setup.verdict.error
    else:
        try:
            setup.kwargs = await _loop_kwargs(deps, claim, record, sink, setup.earlier)
        except Exception as exc:  # bad model string, unknown tool: the run fails, visibly
            log.warning("run %s: cannot start: %s", claim.run_id, exc)
            setup.error = str(exc)
    raise_if_cancelling()
    return setup


async def _drive_loop(deps: RunnerDeps, claim: Claim, record: RunRecord, sink: EventSink,
                      kwargs: dict[str, Any], woken: ParkedState | None,
                      verdict: Verdict | None) -> bool:
    try:
        await parking.attach_replay(deps.backend, claim.run_id, woken, kwargs)
        abort = asyncio.Event()
        await parking.preset_cancel(deps.backend, claim, record, abort)
        raise_if_cancelling()
    except asyncio.CancelledError:
        await _hand_back(deps.backend, claim, None, sink)
        raise
    if verdict is not None:  # nothing awaits between the gate and ``_first_step`` below
        await _go_live(deps, claim, sink, verdict)
    loop_task = asyncio.create_task(run_loop(**kwargs, emit=sink.emit, abort=abort))
    first = _first_step(deps, sink, loop_task, _suspect(verdict)) if verdict is not None else None
    watch = asyncio.create_task(_watch_cancel(deps.backend, claim.run_id, abort))
    try:
        outcome = await _until_loop_ends(loop_task, sink)
    except asyncio.CancelledError:
        await _hand_back(deps.backend, claim, loop_task, sink)
        raise
    finally:
        watch.cancel()
        if first is not None:
            first.cancel()
        if not loop_task.done():  # the runner crashed: its loop must not go on unseen
            loop_task.cancel()
    if outcome.parked:
        await parking.park(deps.backend, claim, record, sink, outcome.parked,
                           kwargs["config"].gate)
        await queue_webhook(deps.backend, record, "requires_action", str(claim.attempt))
        return True
    shared = kwargs["config"].shared
    final = _final(outcome.stop_reason, outcome.error, outcome.result, outcome.usage,
                   outcome.output)
    await sink.close(**final, state=shared.value if shared else None)
    await _finish(deps, claim, replace(record, **final))  # as now stored
    return False


async def _earlier_attempts(deps: RunnerDeps, claim: Claim, sink: EventSink, *, lost: bool
                            ) -> LogState | None:
    """On resume: what the log holds; when a worker was ``lost`` (not a parked run woken by
    an answer), the starts it left open get their ends (``app.engine.resume``), then
    ``run_resumed``. None for a first attempt."""
    if not claim.resumed:
        return None
    state = await retrying(lambda: read_log_state(deps.backend, claim.run_id))
    if state.ended is None and lost:
        for event in state.closers():
            sink.emit(event, checkpoint=False)
        sink.emit(RunResumed(worker=deps.worker, attempt=claim.attempt))
    return state


async def _end_at_start(deps: RunnerDeps, claim: Claim, sink: EventSink, error: str) -> None:
    """The run fails before its loop starts: ``agent_end`` with ``error``."""
    sink.emit(AgentEnd(stop_reason="error", error=error, usage=Usage(), messages=[]))
    await sink.close(**_final("error", error, None, Usage()))
    await _finish(deps, claim)


CRASH_END_S = 30.0
"""Longest the run's end after a crash of its runner may take (s)."""


async def _end_after_crash(deps: RunnerDeps, claim: Claim, crashed: EventSink,
                           exc: Exception) -> None:
    """A bug in the runner ends the run ``failed``, its open starts closed first: the
    worker's heartbeat keeps its claim alive, so it would otherwise stay ``running`` and its
    streams would never end. A run that already ended only gets its close and finish."""
    error = (f"the service failed while driving the run ({type(exc).__name__}); the worker's "
             "log has the details")
    sink = EventSink(deps.backend, claim.run_id, claim.attempt)
    try:
        async with asyncio.timeout(CRASH_END_S):
            await crashed.stop()  # nothing of it lands after the log is read
            state = await retrying(lambda: read_log_state(deps.backend, claim.run_id))
            if state.ended is not None:
                await sink.close(**_final(*ended_fields(state.ended)))
            else:
                for event in state.closers():
                    sink.emit(event, checkpoint=False)
                sink.emit(AgentEnd(stop_reason="error", error=error, usage=Usage(), messages=[]))
                await sink.close(**_final("error", error, None, Usage()))
            await _finish(deps, claim)
    except (FencedOut, RunEnded):
        pass  # another worker owns it, or it ended meanwhile
    except Exception:
        log.exception("run %s: could not end it after the crash", claim.run_id)
    finally:
        if not sink.task.done():
            sink.task.cancel()


def _start_trace(tracing: Tracing | None, claim: Claim, record: RunRecord) -> Trace | None:
    """This attempt's spans, children of the run's stored trace context."""
    if tracing is None:
        return None
    req = record.request
    return tracing.start(RunSpan(
        run_id=record.id, attempt=claim.attempt, model=str(req.get("model") or record.model),
        agent=req.get("agent"), thread_id=req.get("thread_id"),
        traceparent=record.traceparent))


def _suspect(verdict: Verdict | None) -> bool:
    """A resumed run with a death without progress on record goes alone
    (``app.worker.attempts``)."""
    return verdict is not None and verdict.lost > 0


async def _go_live(deps: RunnerDeps, claim: Claim, sink: EventSink, verdict: Verdict) -> None:
    """A resumed run passes its worker's resume gate (``app.worker.attempts``); a shutdown while it
    waits hands it back."""
    try:
        await go_live(deps.resume_gate, deps.backend, claim, verdict)
    except asyncio.CancelledError:
        await _hand_back(deps.backend, claim, None, sink)
        raise


def _first_step(deps: RunnerDeps, sink: EventSink, loop_task: asyncio.Task[LoopOutcome],
                suspect: bool) -> asyncio.Task[None]:
    """The task leaving the resume gate after the run's first step (even if cancelled
    before it ever ran: a done callback leaves it)."""
    task = asyncio.create_task(release_after_first_step(sink, loop_task))
    task.add_done_callback(lambda _: deps.resume_gate.leave(suspect))
    return task


async def _until_loop_ends(loop_task: asyncio.Task[LoopOutcome],
                           sink: EventSink) -> LoopOutcome:
    """The loop's outcome; if the writer dies first (fenced out), stop the loop and re-raise."""
    await asyncio.wait({loop_task, sink.task}, return_when=asyncio.FIRST_COMPLETED)
    if sink.task.done() and not loop_task.done():
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await loop_task
        sink.task.result()  # raises FencedOut (or the writer's failure)
    return loop_task.result()


async def _hand_back(backend: Backend, claim: Claim,
                     loop_task: asyncio.Task[LoopOutcome] | None, sink: EventSink) -> None:
    """Graceful shutdown: the loop releases its taken messages, the checkpoint is flushed and
    the run goes back to the queue for another worker (not a death: ``progress_mark`` -1)."""
    if loop_task is not None:
        loop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await loop_task
    try:
        async with asyncio.timeout(5):
            await sink.close(progress_mark=-1)
        await backend.release_run(claim.run_id, claim.attempt)
    except (BackendError, TimeoutError) as exc:
        log.warning("run %s: hand back failed (%s); it resumes after the lease", claim.run_id,
                    exc)


async def _watch_cancel(backend: Backend, run_id: str, abort: asyncio.Event) -> None:
    while True:
        try:
            await backend.wait_cancel(run_id)
            abort.set()
            return
        except BackendError:
            await asyncio.sleep(0.2)


async def _finish(deps: RunnerDeps, claim: Claim, ended: RunRecord | None = None) -> None:
    """``ended``: the run's record as its end stored it, where this attempt wrote the end
    (else it is read)."""
    backend = deps.backend
    await settle_thread_of(backend, claim.run_id)  # a thread's next run starts
    await after_end(backend, claim.run_id, ended)  # before the ack: a lost worker's redoes it
    await retrying(lambda: backend.finish(claim.run_id, claim.attempt))


def _final(reason: str, error: str | None, result: str | None, usage: Usage,
           output: Any = None) -> dict[str, Any]:
    metrics.record_run_end(STATUS[reason], reason)
    return {"status": STATUS[reason], "stop_reason": reason, "error": error, "result": result,
            "output": output, "usage": asdict(usage), "ended_at": now()}


async def _loop_kwargs(deps: RunnerDeps, claim: Claim, record: RunRecord,
                       sink: EventSink, earlier: LogState | None) -> dict[str, Any]:
    req = record.request
    provider, model_id = deps.resolve_provider(str(req.get("model") or record.model))
    menu = build_menu(tools=req.get("tools"), toolset=req.get("toolset"),
                      tools_source=req.get("tools_source"), tools_allow=req.get("tools_allow"),
                      tools_deny=req.get("tools_deny"), disabled=deps.disabled_tools,
                      registry=deps.registry, env=deps.env)
    menu.load(record.loaded_tools)  # a resumed run's menu is the one it had
    menu.on_load = lambda names: sink.set_fields(loaded_tools=names)
    context, prompts = split_input(req.get("input"))
    if is_thread_run(record.id):  # the thread's history, then this run's input as prompts
        context, prompts = await thread_inputs(deps.backend, record.id)
    resume: Resume | None = None
    if earlier is not None and earlier.started:
        done = load_messages(await retrying(lambda: deps.backend.load_checkpoint(claim.run_id)))
        context, prompts = context + done, prompts if not done else []
        resume = Resume(messages=done, rounds=earlier.rounds, turn_open=earlier.turn_open)
    config = loop_config(record, model_id)
    config.tool_timeout = deps.tool_timeout
    config.max_result_chars = deps.max_result_chars
    config.max_tokens = config.max_tokens or deps.default_max_tokens or None
    config.deadline = run_deadline(record, deps.run_timeout)
    config.resolve = deps.resolve_provider
    config.gate = await parking.run_gate(deps.backend, record, deps.registry, menu, claim)
    config.workspace = thread_workspace(record.id)  # a thread's runs share one
    config.shared = await run_state(deps.backend, record)
    return {"provider": provider, "menu": menu, "config": config,
            "context": context, "prompts": prompts, "resume": resume,
            "steering": BackendQueue(sink, "steer"), "follow_up": BackendQueue(sink, "follow_up"),
            "close_queues": QueueCloser(sink)}


def run_deadline(record: RunRecord, server_timeout: float) -> Deadline | None:
    """The run's deadline, counted from its first start (a resumed run keeps it): the shorter
    of its own ``timeout`` and the server's; None when neither is set."""
    limits = [t for t in (record.request.get("timeout"), server_timeout) if t]
    if not limits:
        return None
    seconds = float(min(limits))
    start = (record.started_at or now()) + record.parked_seconds  # waiting for people: free
    return Deadline(at=start + seconds, seconds=seconds)


def split_input(value: object) -> tuple[list[Message], list[Message]]:
    """``input``: a string is one prompt; a list of messages is the context to continue."""
    if isinstance(value, str):
        return [], [UserMessage(content=value)]
    return load_messages(value or []), []


def loop_config(record: RunRecord, model_id: str) -> LoopConfig:
    """The loop's settings from the create body (API.md names and defaults)."""
    req = record.request
    opt = {k: req[k] for k in ("system", "reset_tool_choice", "parallel_tool_calls",
                               "steering_mode", "follow_up_mode", "temperature", "max_tokens",
                               "max_total_tokens")
           if req.get(k) is not None}
    return LoopConfig(model=model_id, model_label=str(req.get("model") or record.model),
                      tool_choice=tool_choice(req.get("tool_choice")),
                      response_format=format_from_option(req.get("response_format")),
                      max_iterations=req.get("max_iterations", 20), run_id=record.id,
                      tenant=record.tenant, **opt)


def tool_choice(value: object) -> ToolChoice:
    """``"auto"|"required"|"none"`` or ``{"type": "function", "name": X}``."""
    if isinstance(value, dict):
        return ForcedTool(name=str(value["name"]))
    if value in ("required", "none"):
        return "required" if value == "required" else "none"
    return "auto"
