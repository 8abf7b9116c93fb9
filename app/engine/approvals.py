"""The loop's view of human-in-the-loop: which picks wait for a person, and the answers.

A pick waits when it is a client tool (run by the frontend) or needs approval: the tool says so
(``@function(approval=True)`` or a predicate over the arguments), the run names it (``approval``:
tool or toolset names) or the run's policy covers it (``"all"``, or ``"unsafe"``: every tool
with ``unsafe_in`` channels). The loop asks every waiting pick of a turn at once and runs the
turn's picks in the model's order once all are answered; ``ask`` answers in-process
(``runtime.exec(on_approval=...)``), else the loop parks (``app.worker.parking``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from pydantic import TypeAdapter

from providers.base import ToolSpec
from providers.messages import ImageContent, TextContent, ToolCall, ToolResultContent
from tool_registry import Menu, Registry, ToolResult
from tool_registry.registry import WrappedTool

WaitKind: TypeAlias = Literal["approval", "client_tool"]
Policy: TypeAlias = Literal["all", "unsafe"]
DENIED = "The user denied this tool call."
UNANSWERED = "This tool call needs a person's answer and has none; it was not run."
NO_CALLBACK = ("This tool call needs approval and runtime.exec was given no on_approval "
               "callback to ask for it; it was not run.")


@dataclass(slots=True, frozen=True, kw_only=True)
class Decision:
    """A person's answer to one waiting pick: ``approve`` (with edited ``arguments`` or the
    model's), ``deny`` (an ``is_error`` result with ``reason``), or a client tool's ``result``."""

    kind: Literal["approve", "deny", "result"]
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    content: list[TextContent | ImageContent] = field(default_factory=list)
    is_error: bool = False
    note: str | None = None
    """A denial the service made (timeout, no callback): the whole text the model sees."""

    def denial(self) -> ToolResult:
        """The result the model sees for a denied pick."""
        text = self.note or DENIED + (f" Reason: {self.reason}" if self.reason else "")
        return ToolResult.text(text, is_error=True)

    def result(self) -> ToolResult:
        """A client tool's result as the model sees it."""
        return ToolResult(content=list(self.content), is_error=self.is_error)


@dataclass(slots=True, frozen=True, kw_only=True)
class WaitingCall:
    """A pick that waits for a person (``approval_requested`` / ``client_tool_requested``)."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    kind: WaitKind
    index: int
    """Its position among the turn's picks (the model's order)."""
    depth: int = 0
    """How deep the loop that picked it is nested (0: the run's own loop)."""
    parent_tool_call_id: str | None = None
    """The tool call whose body runs that nested loop (None at depth 0)."""


Ask = Callable[[WaitingCall], "Awaitable[Decision | bool] | Decision | bool"]


@dataclass(slots=True, kw_only=True)
class ApprovalGate:
    """What needs a person in one run, and the answers known so far."""

    names: frozenset[str] = frozenset()
    """Tools the run requires approval for (``approval`` list, toolsets expanded)."""
    policy: Policy | None = None
    client_tools: frozenset[str] = frozenset()
    decisions: dict[str, Decision] = field(default_factory=dict)
    expired: str | None = None
    """Set once ``approval_timeout`` passed: the ``expired_ids`` still unanswered are denied
    with this (picks of later turns are asked for as usual)."""
    expired_ids: frozenset[str] = frozenset()
    ask: Ask | None = None
    """Answers in-process instead of parking (``on_approval``)."""

    def kind_of(self, call: ToolCall, menu: Menu) -> WaitKind | None:
        """Whether (and why) ``call`` waits for a person; unknown tools never wait."""
        if call.name in self.client_tools:
            return "client_tool"
        tool = menu.lookup(call.name)
        if tool is None:
            return None
        if call.name in self.names or self.policy == "all":
            return "approval"
        if self.policy == "unsafe" and tool.options.unsafe_in:
            return "approval"
        return "approval" if _tool_wants(tool.options.approval, call.arguments) else None

    def decision(self, call: ToolCall) -> Decision | None:
        """The answer for ``call``; after expiry an unanswered pick is denied."""
        found = self.decisions.get(call.id)
        if found is None and self.expired is not None and call.id in self.expired_ids:
            return Decision(kind="deny", note=self.expired)
        return found

    def waiting(self, calls: list[ToolCall], menu: Menu, depth: int = 0,
                parent: str | None = None) -> list[WaitingCall]:
        """The picks of a turn that wait and have no answer yet, in the model's order (of a
        loop nested ``depth`` deep in the tool call ``parent``)."""
        out = []
        for i, call in enumerate(calls):
            kind = self.kind_of(call, menu)
            if kind is not None and self.decision(call) is None:
                out.append(WaitingCall(tool_call_id=call.id, tool_name=call.name,
                                       args=call.arguments, kind=kind, index=i, depth=depth,
                                       parent_tool_call_id=parent))
        return out

    async def answer(self, call: WaitingCall) -> Decision:
        """``ask``'s answer for ``call`` (True/False become approve/deny)."""
        assert self.ask is not None
        value = self.ask(call)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, Decision):
            return value
        return Decision(kind="approve" if value else "deny")



def exec_gate(approval: Iterable[str] | str | None, registry: Registry, on_approval: Ask | None,
              outer: ApprovalGate | None) -> ApprovalGate:
    """The gate of a ``runtime.exec`` loop. ``on_approval`` (else the outer call's) answers its
    picks in-process; a top-level call without one denies them. A nested call keeps the outer
    run's rules; inside a service run (whose gate parks) with no callback it parks the whole
    run too: it shares the run's answers (``decisions``, the expiry) and its client tools."""
    names = outer.names if outer is not None else frozenset()
    policy = outer.policy if outer is not None else None
    if approval in ("all", "unsafe"):
        policy = approval  # type: ignore[assignment]
    elif approval is not None and not isinstance(approval, str):
        names |= expand_names(approval, registry)
    if outer is not None and outer.ask is None and on_approval is None:
        return ApprovalGate(names=names, policy=policy, client_tools=outer.client_tools,
                            decisions=outer.decisions, expired=outer.expired,
                            expired_ids=outer.expired_ids)
    ask = on_approval or (outer.ask if outer is not None else None) or _denier(NO_CALLBACK)
    return ApprovalGate(names=names, policy=policy, ask=ask)


def _denier(note: str) -> Ask:
    def deny(call: WaitingCall) -> Decision:
        return Decision(kind="deny", note=note)
    return deny


def _tool_wants(option: object, arguments: dict[str, Any]) -> bool:
    """``@function(approval=...)``: a bool, or a predicate over the arguments (one that raises
    asks for approval: fail closed)."""
    if callable(option):
        try:
            return bool(option(arguments))
        except Exception:
            return True
    return bool(option)


def expand_names(names: Iterable[str], registry: Registry) -> frozenset[str]:
    """Tool names with toolset names expanded to their members."""
    out: set[str] = set()
    for name in names:
        out |= registry.expand(name) if registry.has_toolset(name) else {name}
    return frozenset(out)


def gate_for(request: dict[str, Any], registry: Registry) -> ApprovalGate | None:
    """The gate a run's stored request asks for (None: nothing in it waits for a person)."""
    approval = request.get("approval")
    clients = frozenset(str(t["name"]) for t in request.get("client_tools") or [])
    if not approval and not clients and not _registry_asks(registry):
        return None
    policy: Policy | None = approval if approval in ("all", "unsafe") else None
    names = expand_names(approval, registry) if isinstance(approval, list) else frozenset()
    return ApprovalGate(names=names, policy=policy, client_tools=clients)


def _registry_asks(registry: Registry) -> bool:
    return any(t.options.approval for t in registry.tools.values())


def _client_execute(args: dict[str, Any]) -> ToolResult:
    raise RuntimeError("a client tool runs in the frontend, never on the server")


def add_client_tools(menu: Menu, specs: list[dict[str, Any]]) -> None:
    """Put the run's ``client_tools`` on its menu (their results come from the frontend)."""
    for spec in specs:
        tool = WrappedTool(ToolSpec(name=str(spec["name"]),
                                    description=str(spec.get("description") or ""),
                                    parameters=dict(spec.get("parameters") or {
                                        "type": "object", "properties": {}})),
                           _client_execute)
        menu.tools[tool.name] = tool


BLOCKS: TypeAdapter[list[ToolResultContent]] = TypeAdapter(list[ToolResultContent])
"""Content blocks of a client tool's result (stored and posted alike)."""


def decision_json(decision: Decision) -> dict[str, Any]:
    """A decision as stored."""
    return {"kind": decision.kind, "reason": decision.reason, "arguments": decision.arguments,
            "content": [dataclasses.asdict(c) for c in decision.content],
            "is_error": decision.is_error}


def decision_from_json(data: dict[str, Any]) -> Decision:
    """``decision_json`` reversed."""
    blocks: list[TextContent | ImageContent] = BLOCKS.validate_python(data.get("content") or [])
    return Decision(kind=data["kind"], reason=data.get("reason"),
                    arguments=data.get("arguments"), content=blocks,
                    is_error=bool(data.get("is_error")))
