"""The loop itself: rounds, picks in order, steering and follow-up queues, termination.

A provider, a tool menu, two message queues and an event sink in; messages out. Each round
streams one assistant message; its tool calls run in order; text ends the run unless queued
messages keep it going (or a response format's corrective round: ``app.engine.output``).
``run_loop`` emits one ``agent_end`` whatever happens, unless its task is cancelled from outside
(a worker's shutdown: another worker resumes the run from the checkpoint).

Abort (``abort`` set) timeline::

    provider streaming ──abort──▶ stream closed, assistant message ends "aborted" ─▶ agent_end
    tool running       ──abort──▶ tool cancelled, is_error result, rest skipped   ─▶ agent_end
    taken, not injected ────────▶ released back to its queue
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from app.engine.approvals import UNANSWERED, ApprovalGate, Decision, WaitingCall
from app.engine.cancelling import raise_if_cancelling
from app.engine.events import (
    AgentEnd,
    AgentStart,
    ApprovalRequested,
    ClientToolRequested,
    Event,
    MessageEnd,
    MessageStart,
    RunStopReason,
    ToolData,
    ToolExecutionEnd,
    ToolExecutionStart,
    ToolExecutionUpdate,
    TurnEnd,
    TurnStart,
)
from app.engine.history import call_ids_in, repair, unanswered_calls
from app.engine.json_safe import safe_text, safe_value
from app.engine.loop_config import LoopConfig, LoopOutcome, outcome_of
from app.engine.output import OutputCheck
from app.engine.queues import MessageSource, QueuedMessage, QueueMode
from app.engine.resume_point import Resume, last_reply, results_after
from app.engine.shared_state import SharedState
from app.engine.streaming import Abortable, stream_assistant
from app.engine.tool_exec import (
    CUT_OFF_BY_LENGTH,
    SKIPPED_FOR_STEERING,
    NestedParked,
    ToolScope,
    current_scope,
    origin,
    run_tool,
)
from providers.base import ForcedTool, ModelRequest, Provider, ToolChoice
from providers.messages import AssistantMessage, Message, ToolCall, ToolResultMessage
from tool_registry import Menu, ToolContext, ToolResult

log = logging.getLogger(__name__)

Emit = Callable[[Event], None]
CloseQueues = Callable[[], Awaitable[bool]]
"""Refuse new queued messages from now on, unless one is waiting (then False)."""
ABORTED_TOOL = "Tool execution aborted: the run was cancelled."


class _Aborted(Exception):
    """Internal: the abort signal was seen between steps."""


class _Parked(Exception):
    """Internal: a turn's picks wait for a person and nobody can answer in-process."""

    def __init__(self, calls: list[WaitingCall]) -> None:
        super().__init__(f"{len(calls)} picks wait")
        self.calls = calls


class AgentLoop:
    """One run of the loop. Use ``run_loop``; this class only keeps its steps small."""

    def __init__(self, *, provider: Provider, menu: Menu, config: LoopConfig,
                 context: list[Message], emit: Emit, steering: MessageSource | None,
                 follow_up: MessageSource | None, abort: asyncio.Event,
                 close_queues: CloseQueues | None = None) -> None:
        self.provider = provider
        self.menu = menu
        self.cfg = config
        self.context = context
        self._emit_raw = emit
        self.steering = steering
        self.follow_up = follow_up
        self.close_queues = close_queues
        self.abortable = Abortable(abort, config.deadline)
        self.abort = self.abortable.signal
        """Set on cancel or once the deadline passes: what tools and nested loops watch."""
        if config.call_ids is None:
            config.call_ids = set()
        self.call_ids = config.call_ids
        self.call_ids.update(call_ids_in(context))
        if isinstance(config.tool_choice, ForcedTool):  # forcing a deferred tool loads it
            menu.load([config.tool_choice.name])
        self.added: list[Message] = []
        self.tool_choice: ToolChoice = config.tool_choice
        self.rounds = 0
        self.turn = 0
        self.pending: list[QueuedMessage] = []
        """Queued messages taken but not yet injected (acked on injection)."""
        self.pending_source: MessageSource | None = None
        self.pending_msgs: list[Message] = []
        """Messages to inject before the next model call (prompts and taken queue messages)."""
        self.polled = False
        """The steering queue was polled after the turn's last pick, nothing awaited since."""
        self.invalid_args: dict[str, str] = {}
        self.reopened = False
        """The next round continues the turn a lost attempt started (no new turn_start)."""
        self.restarted: set[str] = set()  # calls whose start is in the log (Resume)
        fmt = config.response_format
        self.output = OutputCheck(fmt) if fmt is not None else None
        if not config.depth:  # the run's shared state: one holder, its events the run's
            config.shared = config.shared or SharedState(None)
            config.shared.bind(self.emit)

    def emit(self, event: Event) -> None:
        """Stamp depth and parent on nested events (a deeper loop's are), then emit."""
        if self.cfg.depth and not event.depth:
            event.depth = self.cfg.depth
            event.parent_tool_call_id = self.cfg.parent_tool_call_id
        self._emit_raw(event)

    async def run(self, prompts: list[Message], resume: Resume | None) -> LoopOutcome:
        """The whole run; exactly one ``agent_end`` unless this task is cancelled."""
        try:
            if resume is None:
                self.emit(AgentStart(model=self.cfg.model_label or self.cfg.model,
                                     tools=self.menu.names()))
                if not self.cfg.depth and self.cfg.shared is not None:
                    self.cfg.shared.announce()
            else:
                self.added.extend(resume.messages)
                if self.output is not None:
                    self.output.resumed(resume.messages)
                self.restarted = set(resume.started_calls)
                self.rounds = self.turn = resume.rounds
                for reply in resume.messages:  # a forced tool_choice honoured before stays reset
                    if isinstance(reply, AssistantMessage):
                        self._maybe_reset_choice(reply)
            outcome = await self._run(prompts, resume)
        except _Parked as parked:
            outcome = self._outcome("stop", None)
            outcome.parked = parked.calls
        except _Aborted:
            outcome = self._outcome(*self.abortable.stop_reason())
        except asyncio.CancelledError:
            await self._release_pending()
            raise
        except Exception as exc:
            log.exception("loop failed (run %s)", self.cfg.run_id)
            outcome = self._outcome("error", f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self.abortable.close()
        await self._release_pending()  # taken but never injected: back to the queue
        if outcome.parked:
            return outcome
        self.emit(AgentEnd(stop_reason=outcome.stop_reason, error=outcome.error,
                           usage=outcome.usage, messages=list(outcome.messages),
                           output=outcome.output))
        return outcome

    async def _run(self, prompts: list[Message], resume: Resume | None) -> LoopOutcome:
        more_tools = True
        if resume is not None:
            more_tools, ended = await self._resume(resume)
            if ended is not None:
                return ended
        self.pending_msgs = [*prompts, *self.pending_msgs]  # a steer taken while resuming
        await self._poll(self.steering, self.cfg.steering_mode)
        while True:
            while more_tools or self.pending_msgs:
                if not self.reopened and self._cap_reached():
                    return self._outcome("max_iterations", None)
                if self._budget_spent():
                    return self._outcome("budget", None)
                message = await self._round()
                if message.stop_reason in ("error", "aborted"):
                    self.emit(TurnEnd(message=message, tool_results=[]))
                    return self._outcome(message.stop_reason, message.error_message)
                calls = message.tool_calls()
                more_tools = bool(calls)
                self.polled = False
                results = await self._execute(calls, message) if calls else []
                self.emit(TurnEnd(message=message, tool_results=results))
                self._check_abort()
                if not self.polled and (more_tools or not self._ends_with_close()):
                    await self._poll(self.steering, self.cfg.steering_mode)
            invalid = self._judge_output()
            if invalid is not None:
                return invalid
            if not self.pending_msgs and not await self._late_messages():
                return self._outcome("stop", None)

    async def _resume(self, resume: Resume) -> tuple[bool, LoopOutcome | None]:
        """Finish what the lost attempt left open, as the loop would have: ``(whether the
        model is called next, the outcome when the run ends here)``."""
        reply = last_reply(resume)
        if reply is None:  # no reply in this turn yet: its model call is made (again)
            self.reopened = resume.turn_open
            return True, None
        if resume.turn_open:  # a crash between a reply and its turn_end: run what has no result
            # woken by a steer (a nested pick unanswered): the calls are skipped
            if self.restarted and self.cfg.replay and self.cfg.replay.unanswered(self.cfg.gate):
                await self._poll(self.steering, self.cfg.steering_mode)
            await self._execute(unanswered_calls(self.context), reply)
            self.emit(TurnEnd(message=reply, tool_results=results_after(self.context, reply)))
        if reply.stop_reason in ("error", "aborted"):
            return False, self._outcome(reply.stop_reason, reply.error_message)
        self._check_abort()
        return bool(reply.tool_calls()), None

    async def _late_messages(self) -> bool:
        """Whether a queued message keeps the run going; False once the queues are closed
        (atomically, only while both are empty), so no message accepted later is lost. The
        close is tried first: it succeeds exactly when the polls would take nothing, so a run
        with nothing queued ends in one store call instead of four."""
        if self.close_queues is not None:
            if await self.close_queues():
                return False
            await self._poll(self.steering, self.cfg.steering_mode)  # steering goes first
        while True:
            await self._poll(self.follow_up, self.cfg.follow_up_mode)
            await self._poll(self.steering, self.cfg.steering_mode)  # one sent after its poll
            if self.pending_msgs:
                return True
            if self.close_queues is None or await self.close_queues():
                return False

    def _ends_with_close(self) -> bool:
        """Whether a turn without picks goes straight to ``_late_messages``' close, whose
        failure polls steering first: the turn's own steering poll would only repeat it (not
        when the final answer is judged first: a steer taken here skips the judging)."""
        return self.close_queues is not None and self.output is None

    def _judge_output(self) -> LoopOutcome | None:
        """The final answer against the response format (``app.engine.output``): None when it
        is valid (or none is asked for) or the corrective message goes to the model next;
        else the ``output_invalid`` outcome."""
        check = self.output
        reply = next((m for m in reversed(self.added) if isinstance(m, AssistantMessage)), None)
        if check is None or reply is None or not (problems := check.judge(reply)):
            return None
        if check.retried or self._cap_reached():
            return self._outcome("output_invalid",
                                 check.failure(problems, capped=not check.retried))
        self.pending_msgs.append(check.corrective(problems))
        return None

    def _budget_spent(self) -> bool:
        cap = self.cfg.max_total_tokens
        return cap is not None and cap <= sum(
            m.usage.input_tokens + m.usage.output_tokens for m in self.added
            if isinstance(m, AssistantMessage))

    def _cap_reached(self) -> bool:
        cap = self.cfg.max_iterations
        return cap is not None and self.rounds >= max(1, cap)

    async def _round(self) -> AssistantMessage:
        self._check_abort()
        if self.reopened:  # the lost attempt's turn goes on: already started and counted
            self.reopened = False
        else:
            self.turn += 1
            self.rounds += 1
            self.emit(TurnStart(turn=self.turn))
        await self._inject_pending()
        request = self._request()
        message, self.invalid_args = await stream_assistant(self.provider, request, self.emit,
                                                            self.abortable, self.call_ids)
        self._append(message)
        self._maybe_reset_choice(message)
        return message

    def _request(self) -> ModelRequest:
        cfg = self.cfg
        return ModelRequest(model=cfg.model, system=cfg.system, messages=repair(self.context),
                            tools=self.menu.specs(), tool_choice=self.tool_choice,
                            parallel_tool_calls=cfg.parallel_tool_calls,
                            temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            response_format=cfg.response_format, options=cfg.options)

    def _maybe_reset_choice(self, message: AssistantMessage) -> None:
        choice = self.tool_choice
        if not self.cfg.reset_tool_choice or choice in ("auto", "none"):
            return
        calls = message.tool_calls()
        honoured = bool(calls) if isinstance(choice, str) else any(
            c.name == choice.name for c in calls)
        if honoured:
            self.tool_choice = "auto"

    async def _execute(self, calls: list[ToolCall],
                       message: AssistantMessage | None) -> list[ToolResultMessage]:
        """Run picks in order; after each, poll steering and skip the rest if any is queued."""
        results: list[ToolResultMessage] = []
        cut_off = message is not None and message.stop_reason == "length"
        if self.cfg.gate is not None and not cut_off:
            await self._wait_for_people(self.cfg.gate, calls)
        for call in calls:
            if self.abort.is_set():
                results.append(self._skip(call, self._stopped_tool()))
            elif self.pending_msgs:
                results.append(self._skip(call, SKIPPED_FOR_STEERING))
            elif cut_off:
                results.append(self._skip(call, CUT_OFF_BY_LENGTH))
            else:
                self.polled = False
                result = await self._run_decided(call)
                results.append(self._finish_call(call, result))
                if not self.abort.is_set():
                    await self._poll(self.steering, self.cfg.steering_mode)
                    self.polled = True
        return results

    async def _wait_for_people(self, gate: ApprovalGate, calls: list[ToolCall]) -> None:
        """Ask for every waiting pick of the turn; park unless ``gate.ask`` answers here. A
        steer already queued (or a cancel) skips the picks instead of waiting."""
        waiting = gate.waiting(calls, self.menu, self.cfg.depth, self.cfg.parent_tool_call_id)
        if not waiting or self.abort.is_set():
            return
        await self._poll(self.steering, self.cfg.steering_mode)
        if self.pending_msgs:
            return
        for call in waiting:
            event = ApprovalRequested if call.kind == "approval" else ClientToolRequested
            self.emit(event(tool_call_id=call.tool_call_id, tool_name=call.tool_name,
                            args=call.args))
        if gate.ask is None:
            raise _Parked(waiting)
        for call in waiting:  # in-process answers; a cancel stops the wait (picks skipped)
            asking = asyncio.ensure_future(gate.answer(call))
            if not await self.abortable.run(asking):
                return
            gate.decisions[call.tool_call_id] = asking.result()

    async def _run_decided(self, call: ToolCall) -> ToolResult:
        """Run a pick as its answer says (approved picks with the edited arguments)."""
        gate = self.cfg.gate
        decision = gate.decision(call) if gate is not None else None
        if decision is None and gate is not None and gate.kind_of(call, self.menu):
            decision = Decision(kind="deny", note=UNANSWERED)  # never run unapproved
        if decision is None:
            return await self._run_one(call, self.invalid_args.get(call.id))
        if decision.kind == "deny":
            self._start(call)
            return decision.denial()
        if decision.kind == "result":
            self._start(call)
            return decision.result()
        if decision.arguments is None:
            return await self._run_one(call, self.invalid_args.get(call.id))
        edited = ToolCall(id=call.id, name=call.name, arguments=decision.arguments)
        return await self._run_one(edited, None)

    def _start(self, call: ToolCall) -> None:
        """``tool_execution_start``, unless the log has it (a call whose nested loop parked)."""
        if call.id in self.restarted:
            self.restarted.discard(call.id)
            return
        where = origin(self.menu, call.name)
        self.emit(ToolExecutionStart(tool_call_id=call.id, tool_name=call.name,
                                     args=call.arguments, source=where.source,
                                     server=where.server))

    def _skip(self, call: ToolCall, reason: str) -> ToolResultMessage:
        if call.id in self.restarted and self.cfg.replay is not None:
            for event in self.cfg.replay.close_under(call.id, reason):  # its parked loops
                self._emit_raw(event)
        self._start(call)
        return self._finish_call(call, ToolResult.text(reason, is_error=True))

    async def _run_one(self, call: ToolCall, invalid_args: str | None) -> ToolResult:
        resuming = call.id in self.restarted  # its body resumes a parked nested loop
        self._start(call)
        where = origin(self.menu, call.name)

        def progress(partial: Any, /) -> None:
            self.emit(ToolExecutionUpdate(tool_call_id=call.id, tool_name=call.name,
                                          partial_result=safe_value(partial),
                                          source=where.source, server=where.server))

        def data(name: str, value: Any, id_: str | None, /) -> None:
            self.emit(ToolData(name=name, data=safe_value(value), id=id_ and safe_text(id_),
                               tool_call_id=call.id))

        cfg = self.cfg
        ctx = ToolContext(run_id=cfg.run_id, tool_call_id=call.id, tool_name=call.name,
                          depth=cfg.depth, tenant=cfg.tenant, workspace=cfg.workspace,
                          cancel=self.abort, progress=progress, menu=self.menu, data=data,
                          shared=cfg.shared)
        scope = ToolScope(menu=self.menu, tools=list(self.menu.tools.values()), emit=self.emit,
                          depth=cfg.depth, tool_call_id=call.id, run_id=cfg.run_id,
                          model=cfg.model_label or cfg.model, provider=self.provider,
                          abort=self.abort, extra={"config": cfg})
        token = current_scope.set(scope)
        try:
            task = asyncio.ensure_future(run_tool(call, self.menu, ctx,
                                                  default_timeout=cfg.tool_timeout,
                                                  max_chars=cfg.max_result_chars,
                                                  invalid_args=invalid_args))
        finally:
            current_scope.reset(token)
        try:  # stopped, a nested loop in the body ends on its own first (its ends written)
            finished = await self.abortable.run(task, spare=lambda: bool(scope.live or resuming))
        except NestedParked:
            finished = True
        if scope.parked:  # a nested loop parked the run (even if the body caught it): so do we
            raise _Parked(list(scope.parked))
        if finished and not (scope.execs and self.abort.is_set()):
            return task.result()
        return ToolResult.text(self._stopped_tool(), is_error=True)

    def _stopped_tool(self) -> str:
        deadline = self.abortable.deadline
        return deadline.tool_note() if self.abortable.expired and deadline else ABORTED_TOOL

    def _finish_call(self, call: ToolCall, result: ToolResult) -> ToolResultMessage:
        where = origin(self.menu, call.name)
        self.emit(ToolExecutionEnd(tool_call_id=call.id, tool_name=call.name,
                                   result={"content": result.content, "details": result.details},
                                   is_error=result.is_error, source=where.source,
                                   server=where.server))
        msg = ToolResultMessage(tool_call_id=call.id, tool_name=call.name,
                                content=list(result.content), details=result.details,
                                is_error=result.is_error)
        self.emit(MessageStart(message=msg))
        self._append(msg)
        self.emit(MessageEnd(message=msg))
        return msg

    def _append(self, message: Message) -> None:
        self.context.append(message)
        self.added.append(message)

    async def _poll(self, source: MessageSource | None, mode: QueueMode) -> None:
        if source is None or self.pending:
            return
        taken = await source.take(mode)
        if taken:
            self.pending, self.pending_source = taken, source
            self.pending_msgs.extend(q.message for q in taken)
        raise_if_cancelling()  # a cancel the store call swallowed: what it took is released

    async def _inject_pending(self) -> None:
        for msg in self.pending_msgs:
            self.emit(MessageStart(message=msg))
            self._append(msg)
            self.emit(MessageEnd(message=msg))
        self.pending_msgs = []
        if self.pending and self.pending_source is not None:
            taken, source = self.pending, self.pending_source
            self.pending, self.pending_source = [], None
            await source.ack(taken)

    async def _release_pending(self) -> None:
        if self.pending and self.pending_source is not None:
            taken, source = self.pending, self.pending_source
            self.pending, self.pending_source = [], None
            await asyncio.shield(source.release(taken))

    def _check_abort(self) -> None:
        if self.abort.is_set():
            raise _Aborted

    def _outcome(self, reason: RunStopReason, error: str | None) -> LoopOutcome:
        return outcome_of(self.added, reason, error,
                          self.output.value if self.output is not None else None)


async def run_loop(*, provider: Provider, menu: Menu, config: LoopConfig,
                   context: list[Message], emit: Emit, prompts: list[Message] | None = None,
                   steering: MessageSource | None = None, follow_up: MessageSource | None = None,
                   abort: asyncio.Event | None = None,
                   resume: Resume | None = None,
                   close_queues: CloseQueues | None = None) -> LoopOutcome:
    """Run the loop over ``context`` (extended in place) after injecting ``prompts``.

    ``resume`` continues a run another worker lost: no ``agent_start`` is sent, the open turn
    is finished first (unanswered tool calls run, or the interrupted model call is made again)
    and a run whose last reply was its final answer ends without calling the model again.
    ``close_queues``: called when the loop would stop for want of messages; a message that
    arrived meanwhile makes it fail, and the loop takes that message instead of ending.
    """
    loop = AgentLoop(provider=provider, menu=menu, config=config, context=context, emit=emit,
                     steering=steering, follow_up=follow_up, abort=abort or asyncio.Event(),
                     close_queues=close_queues)
    return await loop.run(list(prompts or []), resume)
