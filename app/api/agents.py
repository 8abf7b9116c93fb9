"""Agents: named, versioned run configurations defined on the server.

An agent is the run options of ``POST /runs`` (``app.api.options``) under a ``name``, with a
``description`` and the request fields a caller may still set (``overridable``; the input and a
thread post's ``multitask`` always, nothing else by default). Agents come from
``AGENTLOOP_AGENTS_FILE`` (YAML or JSON, ``{"agents": [...]}``, beside them the MCP servers
they use, ``"mcp_servers"``, declared as in ``AGENTLOOP_MCP_SERVERS``: every tenant's, read-only,
version 0) or from the admin API (a tenant's own; every change a new version from 1, kept in
the store). A run names one with ``agent``; the pipeline (``app.api.pipeline``) then starts
from the agent's options, lets the request set only what the agent leaves overridable (``403``
naming the field otherwise), and records the agent's name and version on the run.

Client tools are the one field with a middle ground: an agent's ``client_tools`` are the ones
it accepts; a request may declare (a subset of) them by name, and they keep the agent's
descriptions and schemas. Declaring another is ``403`` unless ``client_tools`` is overridable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from app.api.errors import ApiError
from app.api.options import AGENT_NAME, ClientTool, RunOptions
from app.store.contract import AgentStore

OPTION_FIELDS: tuple[str, ...] = tuple(RunOptions.model_fields)
OVERRIDABLE = frozenset({"input", *OPTION_FIELDS})
ALWAYS = frozenset({"input", "multitask"})
"""What every request sets whatever the agent says: its message, and what that message does
while the thread is busy."""


class AgentSpec(RunOptions):
    """An agent's definition: run options, a name and what callers may override."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=AGENT_NAME)
    description: str = Field(default="", max_length=4096)
    overridable: list[str] = Field(default_factory=lambda: ["input"], max_length=64, description=(
        "request fields a caller may set (run option names and input; input always)"))

    @field_validator("overridable")
    @classmethod
    def _known_fields(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in OVERRIDABLE]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is no request field (run options and input)")
        return value

    def definition(self) -> dict[str, Any]:
        """The definition as stored (JSON-ready)."""
        return self.model_dump(mode="json")


@dataclass(slots=True, frozen=True)
class ResolvedAgent:
    """An agent as a run uses it: its definition, version and where it is defined."""

    spec: AgentSpec
    version: int
    source: Literal["file", "api"]
    created_at: float | None = None


def agent_not_found(name: str, field: str | None = "agent") -> ApiError:
    """404 for an agent the caller has no such agent of."""
    return ApiError(404, "agent_not_found", f"no agent {name!r}", field)


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        return orjson.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: not {'JSON' if path.suffix == '.json' else 'YAML'}: "
                         f"{exc}") from exc


def load_file_mcp_servers(path: Path) -> dict[str, Any]:
    """The file's ``mcp_servers`` (``{"<name>": {...}}``, as ``AGENTLOOP_MCP_SERVERS``
    declares them; none when absent); ``ValueError`` for one that is no object."""
    data = _read(path)
    servers = data.get("mcp_servers", {}) if isinstance(data, dict) else {}
    if not isinstance(servers, dict):
        raise ValueError(f"{path}: mcp_servers: expected an object of servers by name")
    return servers


def load_agents_file(path: Path) -> dict[str, AgentSpec]:
    """The agents of ``AGENTLOOP_AGENTS_FILE`` (YAML, or JSON); ``ValueError`` naming the file
    and the place of the first problem."""
    data = _read(path)
    entries = data.get("agents") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f'{path}: expected {{"agents": [...]}}')
    found: dict[str, AgentSpec] = {}
    for i, entry in enumerate(entries):
        try:
            spec = AgentSpec.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"{path}: agents[{i}].{where}: {err['msg']}") from exc
        if spec.name in found:
            raise ValueError(f"{path}: agents[{i}].name: {spec.name!r} is defined twice")
        found[spec.name] = spec
    return found


class AgentCatalog:
    """The agents a tenant may run: the file's (every tenant's) and its own (the store's)."""

    def __init__(self, store: AgentStore, file_agents: dict[str, AgentSpec] | None = None
                 ) -> None:
        self.store = store
        self.file_agents = dict(file_agents or {})

    async def get(self, tenant: str, name: str, version: int | None = None
                  ) -> ResolvedAgent | None:
        """The agent (its latest version, or ``version``), or None."""
        spec = self.file_agents.get(name)
        if spec is not None:
            return ResolvedAgent(spec, 0, "file") if version in (None, 0) else None
        record = await self.store.get_agent(tenant, name, version)
        if record is None:
            return None
        return ResolvedAgent(AgentSpec.model_validate(record.definition), record.version,
                             "api", record.created_at)

    async def all(self, tenant: str) -> list[ResolvedAgent]:
        """Every agent of the tenant, the file's first, by name."""
        own = [ResolvedAgent(AgentSpec.model_validate(r.definition), r.version, "api",
                             r.created_at) for r in await self.store.list_agents(tenant)]
        files = [ResolvedAgent(spec, 0, "file") for _, spec in sorted(self.file_agents.items())]
        return files + own


def _locked(field: str, name: str) -> ApiError:
    return ApiError(403, "field_locked", f"{field}: agent {name!r} does not let a request set "
                    "this", field)


def apply(agent: ResolvedAgent, options: RunOptions, set_fields: frozenset[str]) -> RunOptions:
    """The run options of a request to ``agent``: the agent's, with the fields the request
    set where the agent lets it (``403 field_locked`` naming the first it does not)."""
    spec = agent.spec
    allowed = set(spec.overridable) | ALWAYS
    for name in OPTION_FIELDS:  # in the options' order: the first locked one is named
        if name in set_fields and name not in allowed and name != "client_tools":
            raise _locked(name, spec.name)
    merged = {name: getattr(spec, name) for name in OPTION_FIELDS}
    for name in set_fields & allowed:
        merged[name] = getattr(options, name)
    merged["metadata"] = {**spec.metadata, **options.metadata}  # the door's own keys too
    if "client_tools" in set_fields and "client_tools" not in allowed:
        merged["client_tools"] = _accepted(spec, options.client_tools or [])
    return RunOptions.model_validate(merged)


def _accepted(spec: AgentSpec, declared: list[ClientTool]) -> list[ClientTool]:
    """The agent's own definitions of the client tools a request declares (403 naming one it
    does not accept)."""
    accepts = {tool.name: tool for tool in spec.client_tools or []}
    for i, tool in enumerate(declared):
        if tool.name not in accepts:
            raise ApiError(403, "field_locked", f"client_tools[{i}]: agent {spec.name!r} does "
                           f"not accept a client tool {tool.name!r}", f"client_tools[{i}]")
    return [accepts[tool.name] for tool in declared]
