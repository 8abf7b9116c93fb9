"""Request and response bodies of the HTTP API (API.md). Field shapes only: references to
models, tools and messages are checked by the run pipeline (``app/api/checks.py``); the run
options every door shares are ``app/api/options.py``.

Unknown fields in request bodies are refused (422), so a misspelt option is never silently
ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema

from app.api.options import AgentName, RunOptions
from app.api.thread_schemas import MultitaskOutcome


def _ref(name: str) -> dict[str, str]:
    """A reference to a component of ``app/api/wire_schema.py``; ``app.api.openapi`` turns it into a
    ``$ref`` (pydantic would try to resolve a ``$ref`` among its own definitions)."""
    return {"x-component": name}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


# Fields kept as plain JSON at run time (they are already validated or built from the domain
# types) but documented as the named schemas they are
DateTime = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
OptionalDateTime = Annotated[str | None, WithJsonSchema(
    _nullable({"type": "string", "format": "date-time"}))]
UsageJson = Annotated[dict[str, int], WithJsonSchema(_ref("Usage"))]
MessagesJson = Annotated[list[dict[str, Any]], WithJsonSchema(
    {"type": "array", "items": _ref("Message")})]
InputJson = Annotated[str | list[dict[str, Any]], WithJsonSchema(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": _ref("MessageInput")}]})]
ContentInJson = Annotated[str | list[dict[str, Any]], WithJsonSchema(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": _ref("UserContentInput")}]})]
ContentOutJson = Annotated[str | list[dict[str, Any]], WithJsonSchema(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": _ref("UserContent")}]})]


class CreateRun(RunOptions):
    """``POST /runs`` (and ``POST /threads/{id}/runs``) body: the input and the run options."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"input": "What is 6 times 7?"}]})

    input: InputJson = Field(description="a user message, or a conversation")
    agent: AgentName | None = Field(default=None, description=(
        "run this agent (GET /agents): its options, with the fields it leaves overridable "
        "set by this request"))
    thread_id: str | None = Field(default=None, pattern=r"^thr_[0-9a-f]{32}$", description=(
        "continue this thread (as POST /threads/{id}/runs): input is the new user message(s); "
        "404 thread_not_found when no such thread is yours"))


class PendingCall(BaseModel):
    """A pick a ``requires_action`` run waits for."""

    tool_call_id: str
    tool_name: str
    args: dict[str, Any]
    kind: Literal["approval", "client_tool"]
    decided: bool
    depth: int = Field(default=0, description=(
        "0: the run's own loop picked it; n: a loop nested n deep in a tool call picked it"))
    parent_tool_call_id: str | None = Field(default=None, description=(
        "the tool call whose body runs that nested loop (only when depth > 0)"))


class ApprovalIn(BaseModel):
    """``POST /runs/{id}/approvals`` body."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str = Field(min_length=1, max_length=256)
    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=4096)
    arguments: dict[str, Any] | None = Field(
        default=None, description="approve with these arguments instead of the model's "
        "(validated against the tool's schema)")


class ToolResultIn(BaseModel):
    """``POST /runs/{id}/tool_results`` body: a client tool's result."""

    model_config = ConfigDict(extra="forbid")
    tool_call_id: str = Field(min_length=1, max_length=256)
    content: str | list[dict[str, Any]]
    is_error: StrictBool = False


class QueueCounts(BaseModel):
    """Waiting messages per queue."""

    steer: int = 0
    follow_up: int = 0


class Run(BaseModel):
    """The Run object."""

    id: str
    status: Annotated[Literal["queued", "running", "requires_action", "completed", "failed",
                              "cancelled"], WithJsonSchema(_ref("RunStatus"))]
    model: str
    created_at: DateTime
    started_at: OptionalDateTime
    ended_at: OptionalDateTime
    stop_reason: Annotated[str | None, WithJsonSchema(_nullable(_ref("RunStopReason")))]
    error: str | None
    result: str | None
    output: dict[str, Any] | None = Field(default=None, description=(
        "under a response_format: the final answer, parsed and valid against its schema "
        "(null until the run ends stop, and for any other stop_reason)"))
    usage: UsageJson
    messages: MessagesJson
    metadata: dict[str, str]
    queue: QueueCounts
    events_url: str
    pending: list[PendingCall] = Field(default_factory=list, description=(
        "the picks a requires_action run waits for (empty otherwise)"))
    stream_token: str | None = Field(default=None, description=(
        "a fresh token for this run's events (`GET /runs/{id}/events?token=`): read-only, "
        "scoped to this run, valid AGENTLOOP_STREAM_TOKEN_TTL seconds; every Run returned "
        "carries a new one"))
    thread_id: str | None = Field(default=None, description="the thread this run belongs to")
    agent: str | None = Field(default=None, description="the agent it runs (GET /agents)")
    agent_version: int | None = Field(default=None, description=(
        "the version of the agent it runs (0: the agents file's)"))
    multitask: MultitaskOutcome | None = Field(default=None, description=(
        "on the answer to a thread post: what the posted message did"))


class RunList(BaseModel):
    """``GET /runs``: newest first; pass ``next_cursor`` as ``cursor`` for the next page."""

    runs: list[Run]
    next_cursor: str | None


class QueueMessageIn(BaseModel):
    """``POST /runs/{id}/steer`` and ``/follow_up`` body."""

    model_config = ConfigDict(extra="forbid")
    content: ContentInJson


class Queued(BaseModel):
    """A message accepted into a queue."""

    message_id: str
    kind: Literal["steer", "follow_up"]
    position: int


class QueueItem(BaseModel):
    """A message still waiting in a queue."""

    message_id: str
    kind: Literal["steer", "follow_up"]
    position: int
    content: ContentOutJson


class QueueList(BaseModel):
    """``GET /runs/{id}/queue``: steering first, oldest first."""

    messages: list[QueueItem]


class ToolInfo(BaseModel):
    """One entry of ``GET /tools``."""

    name: str
    description: str
    parameters: dict[str, Any]
    toolsets: list[str]
    deferred: bool


class ErrorDetail(BaseModel):
    """What went wrong: a machine code, a sentence, and the offending field (or null)."""

    code: str
    message: str
    field: str | None


class ErrorBody(BaseModel):
    """Every 4xx/5xx body (API.md)."""

    error: ErrorDetail


class SandboxProbe(BaseModel):
    """The start-up run of one real sandboxed program (``/readyz``)."""

    ok: bool
    mode: str
    """The mode it ran in: ``bubblewrap``, ``unsafe`` or ``disabled`` (not run)."""
    detail: str
    seconds: float


class Health(BaseModel):
    """``/healthz`` and ``/readyz``."""

    status: Literal["ok", "ready", "unavailable"]
    backend: str | None = None
    sandbox: str | None = None
    """How code tools run now; ``disabled`` when the start-up probe failed."""
    sandbox_probe: SandboxProbe | None = None


class Agent(BaseModel):
    """One version of an agent (``GET /agents``)."""

    name: str
    description: str
    version: int = Field(description="from 1, one more with each change (0: the agents file's)")
    source: Literal["file", "api"] = Field(description=(
        "file: AGENTLOOP_AGENTS_FILE (read-only here); api: this tenant's own"))
    created_at: OptionalDateTime
    definition: dict[str, Any] = Field(description=(
        "the run options, name, description and overridable fields it was defined with"))


class AgentList(BaseModel):
    """``GET /agents`` (latest versions) and ``GET /agents/{name}/versions`` (oldest first)."""

    agents: list[Agent]


DEFAULT_CLIENT_TOKEN_TTL = 3600
MAX_CLIENT_TOKEN_TTL = 86_400
"""A client token lives an hour unless asked otherwise, a day at the most."""


class ClientTokenIn(BaseModel):
    """``POST /client_tokens`` body."""

    model_config = ConfigDict(extra="forbid")
    subject: str = Field(min_length=1, max_length=256, description=(
        "the end user (your app's user id): the owner of what the token starts"))
    agents: list[AgentName] | None = Field(default=None, max_length=64, description=(
        "the agents it may start (null: every agent); exactly one: its default"))
    threads: list[str] | None = Field(default=None, max_length=64, description=(
        "the only threads it may use (null: any of its subject's, and new ones)"))
    ttl: int = Field(default=DEFAULT_CLIENT_TOKEN_TTL, ge=60, le=MAX_CLIENT_TOKEN_TTL,
                     description="seconds it is valid")


class ClientToken(BaseModel):
    """A client token (``Authorization: Bearer <token>``, or an EventSource's ``?token=``)."""

    token: str
    expires_at: DateTime
    subject: str
    agents: list[str] | None
    threads: list[str] | None
