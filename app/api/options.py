"""The run options, declared once: every door takes them (``POST /runs`` and thread posts in
their body, ``/ai-sdk/chat`` in its body beside the transport's fields, ``/ag-ui`` in
``forwardedProps.agentloop``). Field shapes and sizes only; what they refer to (models,
tools, toolsets) is checked by the run pipeline (``app.api.checks``).

Unknown fields are refused (422), so a misspelt option is never silently ignored.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from providers.base import ResponseFormat
from tool_registry.mcp.config import SERVER_NAME

METADATA_MAX_KEYS = 64
METADATA_KEY_MAX = 64
METADATA_VALUE_MAX = 512
"""Metadata of a run or a thread: at most 64 keys of 1–64 characters, values of at most 512
(422 naming ``metadata`` beyond)."""
CLIENT_TOOLS_MAX = 128
"""Most client tools one request may declare (the providers' own limit on a menu)."""
MCP_SERVERS_MAX = 8
"""Most MCP servers one run may add (``mcp_servers``)."""
NAMES_MAX = 256
"""Most entries in ``tools``, ``tools_allow``, ``tools_deny`` and ``approval``."""
STATE_MAX_BYTES = 65_536
"""Largest ``state`` a request may start a run with, as compact JSON (422 beyond)."""
RESPONSE_SCHEMA_MAX_BYTES = 65_536
"""Largest ``response_format.json_schema.schema``, as compact JSON (422 beyond)."""

def _bounded(metadata: dict[str, str]) -> dict[str, str]:
    """``metadata`` within the limits above (a ``ValueError`` naming the offending key)."""
    if len(metadata) > METADATA_MAX_KEYS:
        raise ValueError(f"at most {METADATA_MAX_KEYS} keys (got {len(metadata)})")
    for key, value in metadata.items():
        shown = key if len(key) <= 24 else key[:24] + "…"
        if not 1 <= len(key) <= METADATA_KEY_MAX:
            raise ValueError(f"key {shown!r}: keys are 1 to {METADATA_KEY_MAX} characters")
        if len(value) > METADATA_VALUE_MAX:
            raise ValueError(f"the value of {shown!r}: at most {METADATA_VALUE_MAX} characters")
    return metadata


Metadata = Annotated[dict[str, str], AfterValidator(_bounded), WithJsonSchema({
    "type": "object", "maxProperties": METADATA_MAX_KEYS,
    "propertyNames": {"minLength": 1, "maxLength": METADATA_KEY_MAX},
    "additionalProperties": {"type": "string", "maxLength": METADATA_VALUE_MAX},
    "description": f"string pairs for your own use (filterable with metadata.<key>=<value>): "
                   f"at most {METADATA_MAX_KEYS} keys of 1-{METADATA_KEY_MAX} characters, "
                   f"values of at most {METADATA_VALUE_MAX}"})]
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Names = Annotated[list[ToolName], Field(max_length=NAMES_MAX)]
QueueModeField = Literal["one-at-a-time", "all"]
MultitaskField = Literal["reject", "enqueue", "steer", "interrupt"]


class ForcedChoice(BaseModel):
    """``tool_choice`` forcing one function."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128)


class ClientTool(BaseModel):
    """A tool the frontend runs (``client_tools``): on the model's menu like any tool; a pick
    of it parks the run until ``POST /runs/{id}/tool_results`` answers."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(default="", max_length=4096)
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (an object schema)")


class JsonSchemaSpec(BaseModel):
    """``response_format.json_schema``: OpenAI's shape (the keywords a schema may use: the
    README, "Structured output")."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$", description="the format's name")
    description: str | None = Field(default=None, max_length=4096, description=(
        "what the format is for (providers that take one are told)"))
    schema_: dict[str, Any] = Field(alias="schema", description=(
        "an object JSON Schema (type 'object' at the top) of the keywords agentloop validates; "
        f"at most {RESPONSE_SCHEMA_MAX_BYTES} bytes of JSON"))
    strict: StrictBool = Field(default=False, description=(
        "ask providers that constrain decoding to a schema to do so; the schema must then be "
        "strict-compatible (every object closed, every property required)"))

    @field_validator("schema_")
    @classmethod
    def _bounded(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if len(orjson.dumps(schema)) > RESPONSE_SCHEMA_MAX_BYTES:
            raise ValueError(f"at most {RESPONSE_SCHEMA_MAX_BYTES} bytes of JSON")
        return schema

    @model_serializer(mode="wrap")
    def _as_sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        out["schema"] = out.pop("schema_", self.schema_)
        return out


class ResponseFormatOption(BaseModel):
    """``response_format`` (OpenAI's shape): ``{"type": "json_schema", "json_schema": {...}}``
    holds the final answer to a schema; ``{"type": "text"}`` is no format."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["json_schema", "text"] = Field(description=(
        "json_schema, or text (none); json_object is not taken: use json_schema with "
        "{\"type\": \"object\"}"))
    json_schema: JsonSchemaSpec | None = None

    @model_validator(mode="after")
    def _spec_with_type(self) -> ResponseFormatOption:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is required with type json_schema, and only then")
        return self

    def domain(self) -> ResponseFormat | None:
        """The format the loop holds answers to (None for ``text``)."""
        spec = self.json_schema
        if spec is None:
            return None
        return ResponseFormat(name=spec.name, schema=spec.schema_, strict=spec.strict,
                              description=spec.description)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]{0,8192}")


def _header_name(name: str) -> str:
    if not _TOKEN.fullmatch(name):
        raise ValueError("a header name is 1-128 letters, digits or !#$%&'*+-.^_`|~")
    return name


def _header_value(value: str) -> str:
    if not _FIELD_VALUE.fullmatch(value):
        raise ValueError("a header value is at most 8192 printable ASCII characters or tabs "
                         "(no line breaks)")
    return value


HeaderName = Annotated[str, AfterValidator(_header_name)]
"""An HTTP header's name: an RFC 9110 token."""
HeaderValue = Annotated[str, AfterValidator(_header_value)]
"""An HTTP header's value: printable ASCII and tabs (a line break would end the header and
start another)."""


class RunMcpServer(BaseModel):
    """An MCP server a run adds (``mcp_servers``): streamable HTTP at ``url``, which must
    match one of the operator's ``AGENTLOOP_MCP_ALLOW_URLS`` patterns and pass the SSRF
    guard. Its tools join the run's menu as ``<name>__<tool>``."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=SERVER_NAME, description="prefixes its tools' names")
    url: str = Field(min_length=1, max_length=2048, description="its streamable HTTP endpoint")
    headers: dict[HeaderName, HeaderValue] = Field(
        default_factory=dict, max_length=32, description=(
            "sent with every request (an Authorization header, say); taken literally: names "
            "are tokens, values printable ASCII"))


AGENT_NAME = r"^[A-Za-z0-9_-]{1,64}$"
AgentName = Annotated[str, StringConstraints(pattern=AGENT_NAME)]


class RunOptions(BaseModel):
    """How a run runs: the fields every door takes (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, max_length=256,
                              description="provider:model; server default if unset")
    system: str | None = None
    tools: Names | None = None
    toolset: str | None = Field(default=None, max_length=128)
    tools_source: str = Field(default="api", max_length=128)
    tools_allow: Names | None = None
    tools_deny: Names | None = None
    tool_choice: Literal["auto", "required", "none"] | ForcedChoice = "auto"
    reset_tool_choice: StrictBool = True
    parallel_tool_calls: StrictBool | None = None
    max_iterations: StrictInt | None = 20
    steering_mode: QueueModeField = "one-at-a-time"
    follow_up_mode: QueueModeField = "one-at-a-time"
    temperature: float | None = Field(default=None, ge=0)
    max_tokens: StrictInt | None = Field(
        default=None, ge=1,
        description="per model call; unset: AGENTLOOP_DEFAULT_MAX_TOKENS")
    max_total_tokens: StrictInt | None = Field(
        default=None, ge=1,
        description="the run's token budget (input + output over all its model calls): once "
                    "spent, the run ends with stop_reason 'budget' (status completed); checked "
                    "before each model call, so at most the one call that crossed it overshoots")
    timeout: float | None = Field(
        default=None, gt=0, strict=True,
        description="seconds the run may take from its start before it ends with stop_reason "
                    "'error'; at most (and by default) AGENTLOOP_RUN_TIMEOUT")
    metadata: Metadata = Field(default_factory=dict)
    webhook: str | None = Field(default=None, min_length=1, max_length=2048, description=(
        "an http(s) URL told when the run ends or waits (run.completed, run.failed, "
        "run.cancelled, run.requires_action), signed per Standard Webhooks; default: the "
        "agent's, else the tenant's (AGENTLOOP_TENANT_WEBHOOKS)"))
    multitask: MultitaskField | None = Field(default=None, description=(
        "on a thread: what the message does while the thread is busy (default enqueue)"))
    approval: Names | Literal["all", "unsafe"] | None = Field(
        default=None, description="tools (or toolsets) whose picks wait for approval, or a "
        "policy: 'all' tools, or 'unsafe' ones (tools with unsafe_in channels)")
    approval_timeout: float | None = Field(
        default=None, gt=0, strict=True,
        description="seconds a parked run waits; then its unanswered picks are denied")
    client_tools: list[ClientTool] | None = Field(default=None, max_length=CLIENT_TOOLS_MAX)
    mcp_servers: list[RunMcpServer] | None = Field(
        default=None, max_length=MCP_SERVERS_MAX, description=(
            "MCP servers whose tools this run adds to its menu (<name>__<tool>); each url must "
            "match AGENTLOOP_MCP_ALLOW_URLS and pass the SSRF guard"))
    response_format: ResponseFormatOption | None = Field(default=None, description=(
        "hold the final answer to a JSON Schema: the run's output (Run.output, agent_end."
        "output) is it parsed; one corrective retry, then stop_reason output_invalid"))
    state: dict[str, Any] | None = Field(default=None, description=(
        "the shared state the run starts with (a JSON object its tools read and change: "
        "state_snapshot / state_delta events, AG-UI's agent state); by default a thread's "
        "run starts from the state its thread's last run ended with"))

    @field_validator("state")
    @classmethod
    def _bounded_state(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(orjson.dumps(value)) > STATE_MAX_BYTES:
            raise ValueError(f"at most {STATE_MAX_BYTES} bytes of JSON")
        return value

    def option_fields(self) -> dict[str, Any]:
        """The options as JSON-ready data (what a run stores of them)."""
        return self.model_dump(mode="json", include=set(OPTION_NAMES))

    def options_set(self) -> frozenset[str]:
        """The run options the caller set (not left to their defaults)."""
        return frozenset(self.model_fields_set) & OPTION_NAMES


OPTION_NAMES = frozenset(RunOptions.model_fields)
"""The run options' names."""
