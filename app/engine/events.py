"""The loop → client vocabulary (API.md "Events"), and its one JSON encoding.

Every event is a slotted dataclass with a literal ``type`` first; ``depth`` is 0 for a run's own
loop and n for a loop nested inside a tool (``parent_tool_call_id`` names that tool call). The
runner stamps ``seq``, ``run_id`` and ``ts`` when it writes an event: ``encode_event`` produces
the exact bytes stored in the event log and sent as SSE ``data:``. Clients must ignore types
they do not know.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeAlias

import orjson

from providers.messages import AssistantMessage, Message, ToolResultMessage, Usage


@dataclass(slots=True, kw_only=True)
class AgentStart:
    type: Literal["agent_start"] = "agent_start"
    model: str
    tools: list[str]
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class TurnStart:
    type: Literal["turn_start"] = "turn_start"
    turn: int
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class MessageStart:
    """A user or tool-result message in full; an assistant message with empty content."""

    type: Literal["message_start"] = "message_start"
    message: Message
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class MessageUpdate:
    """One streamed delta: ``{kind, content_index, text?, tool_call_id?, tool_name?,
    arguments?}``; never the whole partial message."""

    type: Literal["message_update"] = "message_update"
    delta: dict[str, Any]
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class MessageEnd:
    type: Literal["message_end"] = "message_end"
    message: Message
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class ToolExecutionStart:
    type: Literal["tool_execution_start"] = "tool_execution_start"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    source: str | None = None
    """Where the tool comes from when it is not this service's own (``"mcp"``)."""
    server: str | None = None
    """The MCP server of an MCP tool."""
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class ToolExecutionUpdate:
    type: Literal["tool_execution_update"] = "tool_execution_update"
    tool_call_id: str
    tool_name: str
    partial_result: Any
    source: str | None = None
    """Where the tool comes from when it is not this service's own (``"mcp"``)."""
    server: str | None = None
    """The MCP server of an MCP tool."""
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class ToolExecutionEnd:
    """``result`` is ``{content, details}``."""

    type: Literal["tool_execution_end"] = "tool_execution_end"
    tool_call_id: str
    tool_name: str
    result: dict[str, Any]
    is_error: bool
    source: str | None = None
    """Where the tool comes from when it is not this service's own (``"mcp"``)."""
    server: str | None = None
    """The MCP server of an MCP tool."""
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class TurnEnd:
    type: Literal["turn_end"] = "turn_end"
    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    depth: int = 0
    parent_tool_call_id: str | None = None


RunStopReason: TypeAlias = Literal["stop", "max_iterations", "error", "aborted",
                                  "output_invalid", "budget"]


@dataclass(slots=True, kw_only=True)
class AgentEnd:
    """Exactly one per loop. ``messages`` is everything the loop added; ``output`` the final
    answer parsed, when the loop has a response format and ends ``stop`` (else left out)."""

    type: Literal["agent_end"] = "agent_end"
    stop_reason: RunStopReason
    error: str | None
    usage: Usage
    messages: list[Message]
    output: dict[str, Any] | None = None
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class MessageQueued:
    """Service event: a steering or follow-up message was queued."""

    type: Literal["message_queued"] = "message_queued"
    message_id: str
    kind: Literal["steer", "follow_up"]
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class MessageWithdrawn:
    """Service event: a queued message was withdrawn before the loop took it."""

    type: Literal["message_withdrawn"] = "message_withdrawn"
    message_id: str
    kind: Literal["steer", "follow_up"]
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class RunCreated:
    """Service event, always seq 1: the run was accepted and waits for a worker. Written with
    the run itself, so a subscriber sees the run acknowledged before any worker takes it."""

    type: Literal["run_created"] = "run_created"
    model: str
    status: Literal["queued"] = "queued"
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class RunResumed:
    """Service event: a worker took the run over after a crash and continues it."""

    type: Literal["run_resumed"] = "run_resumed"
    worker: str
    attempt: int
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class ApprovalRequested:
    """The model picked a tool that needs approval: the run waits (``requires_action``) until
    ``POST /runs/{id}/approvals`` answers for ``tool_call_id``."""

    type: Literal["approval_requested"] = "approval_requested"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class ClientToolRequested:
    """The model picked a client tool: the frontend runs it and answers with
    ``POST /runs/{id}/tool_results``."""

    type: Literal["client_tool_requested"] = "client_tool_requested"
    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class ApprovalDecided:
    """Service event: a decision (or a client tool's result) was accepted for a waiting pick."""

    type: Literal["approval_decided"] = "approval_decided"
    tool_call_id: str
    decision: Literal["approve", "deny", "result"]
    reason: str | None = None
    args: dict[str, Any] | None = None
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class ToolData:
    """Typed data a running tool sent its client (``ToolContext.emit_data``): a frontend's
    generative UI. A later one with the same ``name`` and ``id`` updates it in place."""

    type: Literal["data"] = "data"
    name: str
    data: Any
    id: str | None = None
    tool_call_id: str
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class StateSnapshot:
    """The run's shared state, whole: where it starts, or a tool set it (``set_state``)."""

    type: Literal["state_snapshot"] = "state_snapshot"
    state: dict[str, Any]
    depth: int = 0
    parent_tool_call_id: str | None = None


@dataclass(slots=True, kw_only=True)
class StateDelta:
    """A change to the run's shared state: RFC 6902 JSON Patch operations, in order
    (``ToolContext.update_state``)."""

    type: Literal["state_delta"] = "state_delta"
    delta: list[dict[str, Any]]
    depth: int = 0
    parent_tool_call_id: str | None = None


LoopEvent: TypeAlias = (
    AgentStart | TurnStart | MessageStart | MessageUpdate | MessageEnd | ToolExecutionStart
    | ToolExecutionUpdate | ToolExecutionEnd | TurnEnd | AgentEnd | ApprovalRequested
    | ClientToolRequested | ToolData | StateSnapshot | StateDelta
)
ServiceEvent: TypeAlias = (RunCreated | MessageQueued | MessageWithdrawn | RunResumed
                           | ApprovalDecided)
Event: TypeAlias = LoopEvent | ServiceEvent

_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_PASSTHROUGH_DATACLASS
OMIT_IF_NONE = frozenset({"signature", "details", "error_message", "parent_tool_call_id",
                          "output", "id", "data", "url", "mime_type", "name", "source",
                          "server"})
"""Optional fields (API.md's ``field?``) left out when unset instead of sent as ``null`` (an
attachment's ``data`` or ``url``, an image's ``mime_type``, a document's ``name``; a user
message's client ``id``, a tool's data ``id``; a tool event's ``source`` and ``server``)."""
_FIELDS: dict[type, tuple[str, ...]] = {}


def _default(value: object) -> object:
    """Dataclasses as objects without their unset optional fields; anything else as text."""
    cls = type(value)
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(value) or isinstance(value, type):
            return str(value)
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(value))
    out = {}
    for name in names:
        item = getattr(value, name)
        if item is not None or name not in OMIT_IF_NONE:
            out[name] = item
    return out


def json_bytes(value: object) -> bytes:
    """The JSON of any event, message or content block, as stored and streamed."""
    return orjson.dumps(value, default=_default, option=_OPTS)


def utc_now() -> str:
    """RFC 3339 UTC timestamp with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def encode_event(event: Event, *, seq: int, run_id: str, ts: str) -> bytes:
    """The stored and streamed JSON of an event: its fields plus ``seq``, ``run_id``, ``ts``."""
    body = orjson.dumps(event, default=_default, option=_OPTS)
    head = orjson.dumps({"seq": seq, "run_id": run_id, "ts": ts})
    # splice: {"seq":..,"run_id":..,"ts":..,<event fields>}
    return head[:-1] + b"," + body[1:]


def encode_event_body(event: Event, *, run_id: str, ts: str) -> bytes:
    """``encode_event`` without ``seq``: the backend splices ``{"seq":N,`` in when it allocates
    the seq atomically (``app.store.contract.with_seq``). A streamed delta, nearly every event
    of a run, is written as the dict ``_default`` would make of it, without calling it."""
    if type(event) is MessageUpdate:
        fields: dict[str, Any] = {"type": event.type, "delta": event.delta, "depth": event.depth}
        if event.parent_tool_call_id is not None:
            fields["parent_tool_call_id"] = event.parent_tool_call_id
        body = orjson.dumps(fields, default=_default, option=_OPTS)
    else:
        body = orjson.dumps(event, default=_default, option=_OPTS)
    return b'{"run_id":%s,"ts":"%s",%s' % (orjson.dumps(run_id), ts.encode(), body[1:])


def to_json_value(value: object) -> Any:
    """Plain JSON types for any message, event or result part (for pydantic responses)."""
    return orjson.loads(orjson.dumps(value, default=_default, option=_OPTS))
