"""What an operator (or a run) says about one MCP server: where it is, how to reach it, which
of its tools to offer and which of them wait for approval.

``AGENTLOOP_MCP_SERVERS`` is a JSON object of these by name; a run's ``mcp_servers`` is a list
of ``{"name", "url", "headers"}`` (streamable HTTP only). Header and environment values may
name variables (``${VAR}``), filled in at connect time from the process environment; the
filled-in values are never kept on the config, shown in its ``repr`` or logged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SERVER_NAME = r"^[A-Za-z0-9_-]{1,32}$"
"""A server's name: it prefixes its tools' names (``<name>__<tool>``), which providers limit
to 64 letters, digits, ``_`` and ``-``."""
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
Transport = Literal["streamable_http", "sse", "stdio"]


class McpConfigError(ValueError):
    """A server declaration that cannot be used; the message names the server and field."""


class McpServerConfig(BaseModel):
    """One MCP server (``AGENTLOOP_MCP_SERVERS`` or a run's ``mcp_servers``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=SERVER_NAME)
    url: str | None = Field(default=None, max_length=2048)
    command: list[str] | None = Field(default=None, min_length=1)
    """stdio: the program and its arguments."""
    transport: Transport | None = None
    """Default: ``stdio`` with a ``command``, else ``streamable_http``."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """stdio: variables set for the program (over a minimal environment)."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one tool call may take (then an ``is_error`` result and an MCP cancellation)."""
    allowed_tools: list[str] | None = None
    """Only these of the server's tools are offered (None: all)."""
    approval: Literal["always", "never"] | list[str] = "never"
    """Which of its tools wait for a person's approval: all, none, or these (server-side
    names)."""
    defer: bool = False
    """Its tools are deferred: loaded through ``tool_search``."""

    @model_validator(mode="after")
    def _where(self) -> McpServerConfig:
        kind = self.kind
        if kind == "stdio" and not self.command:
            raise ValueError("a stdio server needs a command")
        if kind != "stdio" and not self.url:
            raise ValueError(f"a {kind} server needs a url")
        return self

    @property
    def kind(self) -> Transport:
        """The transport in force."""
        return self.transport or ("stdio" if self.command else "streamable_http")

    def needs_approval(self, tool: str) -> bool:
        """Whether picks of the server's ``tool`` wait for approval."""
        if isinstance(self.approval, list):
            return tool in self.approval
        return self.approval == "always"

    def offers(self, tool: str) -> bool:
        """Whether ``tool`` is offered at all (``allowed_tools``)."""
        return self.allowed_tools is None or tool in self.allowed_tools


def expand(values: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """``values`` with every ``${VAR}`` replaced from ``env``; ``McpConfigError`` naming the
    variable (never the value) when one is unset."""
    def one(match: re.Match[str]) -> str:
        var = match.group(1)
        if var not in env:
            raise McpConfigError(f"${{{var}}} is not set in the environment")
        return env[var]

    return {key: _VAR.sub(one, value) for key, value in values.items()}


def parse_servers(raw: Mapping[str, Any]) -> dict[str, McpServerConfig]:
    """``{"<name>": {...}}`` as configs; ``McpConfigError`` naming the server and the field."""
    out: dict[str, McpServerConfig] = {}
    for name, spec in raw.items():
        if not isinstance(spec, dict):
            raise McpConfigError(f"{name}: expected an object")
        try:
            out[name] = McpServerConfig(**{**spec, "name": name})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "(server)"
            raise McpConfigError(f"{name}.{where}: {err['msg']}") from None
    return out
