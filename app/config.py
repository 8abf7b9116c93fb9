"""Service settings: the only module that reads the environment (and ``.env``).

Every ``AGENTLOOP_*`` variable is a field of ``Settings`` (README.md, "Configuration", lists
each with its default). Provider credentials (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
``AWS_*``, a profile's key variable …) are not fields: ``provider_env()`` snapshots the process
environment, overlaid on ``.env``, and the catalog and the tool gating read that mapping
instead of ``os.environ``.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import orjson
from dotenv import dotenv_values
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024
_WINDOWS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}


class Limits(BaseModel):
    """Quotas of one scope (a tenant, or each end user of it); None: no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_active_runs: int | None = Field(default=None, ge=0)
    """Runs not yet ended (queued, running or waiting in ``requires_action``)."""
    runs_per_minute: int | None = Field(default=None, ge=0)
    """Runs started in any 60 seconds (a sliding window)."""
    tokens_per_day: int | None = Field(default=None, ge=0)
    """Input + output tokens of the runs that ended this UTC day."""


class TenantLimits(Limits):
    """A tenant's quotas, and ``per_subject``: each of its end users' own."""

    per_subject: Limits | None = None


_LIMITS = TypeAdapter(dict[str, TenantLimits])


@functools.lru_cache(maxsize=4)
def _limits_table(raw: str) -> dict[str, TenantLimits]:
    return _LIMITS.validate_json(raw)


@functools.lru_cache(maxsize=4)
def _webhook_table(raw: str) -> dict[str, str]:
    return TypeAdapter(dict[str, str]).validate_json(raw)


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class Settings(BaseSettings):
    """``AGENTLOOP_<FIELD>`` configures each field; ``.env`` in the working directory too."""

    model_config = SettingsConfigDict(env_prefix="AGENTLOOP_", env_file=".env",
                                      extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = 8000
    processes: str = "1"
    """API processes ``agentloop serve`` runs on its one port, each with its own embedded worker
    (``app.process.supervisor``): a whole number ≥ 1, or ``auto`` (the CPU cores this process
    may use). More than one needs ``redis_url``. ``--processes`` wins."""
    redis_url: str | None = None
    """Unset: the in-process memory backend (one process, nothing survives a restart)."""
    redis_cluster: bool = False
    """``true``: ``redis_url`` names seed nodes of a Redis Cluster (``redis://h1:p1,h2:p2``)."""
    redis_max_connections: int = Field(default=256, ge=1)
    """Connections a process opens to a Redis node at the most (on a cluster: to each node, for
    commands and for scripts each); a caller finding them all in use waits up to 5 s for one,
    then gets ``503``."""
    default_model: str | None = None
    """Unset: the first provider with a key (openai, anthropic, gemini), else ``demo:echo``."""
    api_keys: str = ""
    """``key1:tenantA,key2:tenantB``; empty (and no file) turns auth off."""
    api_keys_file: Path | None = None
    stream_token_secret: str | None = None
    stream_token_ttl: int = Field(default=900, ge=1)
    jwt_jwks_url: str | None = None
    """An identity provider's key set (JWKS): its JWTs are end users' credentials."""
    jwt_secret: str | None = None
    """The shared secret an identity provider signs its JWTs with (HS256/384/512)."""
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_tenant: str = "default"
    """The tenant of every JWT's end user, unless ``jwt_tenant_claim`` names a claim."""
    jwt_tenant_claim: str | None = None
    jwt_agents_claim: str = "agents"
    """The claim listing the agents a JWT's end user may start (absent: every agent)."""
    jwt_jwks_refetch_seconds: float = Field(default=1.0, ge=0)
    """Least seconds between two key-set fetches for a key id the cached set lacks (a
    rotation at the provider is picked up at once, a flood of unknown ids costs at most one
    fetch per interval)."""
    subject_rate: str = ""
    """Requests one end user may make per window, e.g. ``60/minute`` (``second``, ``minute``,
    ``hour``); empty: no limit. Answered ``429`` with ``Retry-After`` beyond."""
    agents_file: Path | None = None
    """A YAML or JSON file of agents (``{"agents": [...]}``) every tenant may run."""
    cors_origins: str = ""
    max_body_bytes: int = Field(default=MiB, ge=1)
    max_streams_per_user: int = Field(default=32, ge=0)
    """Event streams one end user may hold open at once in each API process, every door's
    counted together (``/runs/{id}/events``, a thread's events, the AI SDK's and AG-UI's
    streams, ``/mcp`` calls; with its own token or a stream token for its run or thread);
    one more is ``429`` ``too_many_streams``. The tenant's API key, and stream tokens for the
    tenant's own runs, are not counted. 0: no limit."""
    max_queued_messages: int = Field(default=100, ge=1)
    """Messages one run may hold waiting to be taken (its steers and follow-ups together; a
    thread's run that has not started: its input). One more is refused with 409
    ``queue_full`` and nothing is queued; the loop takes them, which makes room again."""
    run_ttl: int = Field(default=7 * 24 * 3600, ge=60)
    thread_ttl: int = Field(default=30 * 24 * 3600, ge=60)
    """Seconds an idle thread is kept after its last activity (a busy one never expires)."""
    worker_concurrency: int = Field(default=100, ge=1)
    lease_seconds: float = Field(default=5.0, gt=0)
    """A worker silent this long is taken for dead: another one resumes its runs."""
    heartbeat_seconds: float = Field(default=1.0, gt=0)
    """How often a worker says it is alive (one Redis write per worker; capped at lease/2)."""
    worker_name: str | None = None
    """This worker's name (default: host-pid-random); shows in logs and Redis CLIENT LIST."""
    provider_factory: str | None = None
    """``module:callable`` returning a ``resolve_provider(model) -> (Provider, model_id)`` used
    instead of the built-in catalog (custom or scripted providers)."""
    sse_ping_seconds: float = Field(default=15.0, gt=0)
    sse_retry_seconds: float = Field(default=1.0, ge=0, le=3600)
    """Sent as the ``retry:`` field opening every event stream: how long a client waits
    before it reconnects after a dropped connection."""
    playground: bool = True
    """Serve the playground page at ``GET /`` (and its files under ``/static/``)."""
    tool_modules: str = ""
    """Comma-separated modules imported at start-up (found on ``sys.path`` or in the working
    directory) so their ``@function`` tools register; one that cannot be imported stops the
    service from starting."""
    disabled_tools: str = ""
    mcp_servers: str = ""
    """JSON ``{"<name>": {"url" | "command", "transport", "headers", "env", "timeout",
    "allowed_tools", "approval", "defer"}}``: MCP servers whose tools make toolset
    ``mcp:<name>`` (docs/mcp.md). Header values may name variables: ``${VAR}``."""
    mcp_allow_urls: str = ""
    """Comma-separated URL patterns (``*`` matches anything) a run's own ``mcp_servers`` may
    connect to; empty: a run may add none. Such URLs pass the SSRF guard too."""
    tool_timeout: float = Field(default=120.0, gt=0)
    max_result_chars: int = Field(default=32_000, ge=100)
    run_timeout: float = Field(default=3600.0, ge=0)
    """Seconds a run may take from its start (resumes included) before it is stopped with
    ``stop_reason`` ``error``; also the most a run's own ``timeout`` may ask. 0 = no deadline."""
    max_attempts: int = Field(default=3, ge=0)
    """Consecutive attempts whose worker died (``os._exit``, a crash, OOM) without the run
    making progress before the run ends ``failed``; 0 = retry forever."""
    default_max_tokens: int = Field(default=8192, ge=0)
    """``max_tokens`` of every model call whose run sets none; 0 = send none (the provider's
    own default; Anthropic's adapter, which must send one, then sends 8192)."""
    event_flush_ms: float = Field(default=2.0, ge=0)
    """Least milliseconds between two event writes of one run: while a run streams fast, its
    events go out in batches (one store round trip and one SSE send each); the first event
    after a pause is never held back."""
    workspace_root: Path | None = None
    workspace: Path | None = None
    workspace_max_bytes: int = Field(default=1024 * MiB, ge=0)
    """Size cap of one run's workspace (0: none); see ``tool_registry.builtin.quota``."""
    workspace_sweep_seconds: float = Field(default=600.0, ge=0)
    """How often a worker removes the workspaces of expired runs (0: never);
    ``app.worker.janitor``."""
    unsafe_code_tools: bool = False
    code_timeout_max: float = Field(default=300.0, gt=0)
    fetch_allow_private: bool = False
    """Let ``http_fetch`` and attachment fetches reach loopback and private addresses (cloud
    metadata addresses never)."""
    attachment_max_bytes: int = Field(default=10 * MiB, ge=1)
    """Largest image or document one message block may hold (decoded), or a URL fetched for
    a provider that takes no URLs may serve."""
    attachment_request_max_bytes: int = Field(default=20 * MiB, ge=1)
    """Largest sum of the inline attachments of one request (decoded)."""
    attachment_fetch_timeout: float = Field(default=20.0, gt=0)
    """Seconds one attachment fetch may take, redirects included."""
    provider_retries: int = Field(default=4, ge=1)
    provider_connect_timeout: float = Field(default=10.0, gt=0)
    provider_read_timeout: float = Field(default=300.0, gt=0)
    provider_http2: bool = False
    """On: HTTP/2 (httpcore) for https providers. Off (the default): the lean HTTP/1.1
    transport carries https too, as it does plain http: about a sixth of httpcore's client CPU
    per streamed call, over HTTP/1.1 or HTTP/2 (``bench/transports.py``)."""
    provider_max_connections: int = Field(default=2000, ge=1)
    """Open provider connections at once (each streaming run holds one over HTTP/1.1)."""
    openai_profiles: str = ""
    """JSON ``{"name": {"base_url", "api_key_env"?, "protocol"?}}`` of OpenAI-compatible servers."""
    tenant_limits: str = ""
    """JSON ``{"<tenant>" | "*": {"max_active_runs", "runs_per_minute", "tokens_per_day",
    "per_subject": {the same three}}}``: quotas per tenant, and per end user of it
    (``app.api.quotas``); a tenant's own entry replaces ``*``. Empty: no quotas."""
    webhook_secret: str | None = None
    """``whsec_<base64>``: the Standard Webhooks signing secret; unset: webhooks are off."""
    tenant_webhooks: str = ""
    """JSON ``{"<tenant>" | "*": "<url>"}``: where a tenant's runs that name no webhook (nor
    their agent) send theirs."""
    webhook_allow_urls: str = ""
    """Comma-separated URL prefixes a webhook may target even where the SSRF guard refuses
    (a private address, loopback)."""
    webhook_retry_seconds: float = Field(default=5.0, gt=0)
    """The first retry's delay; each next one doubles, up to ``webhook_retry_cap``."""
    webhook_retry_cap: float = Field(default=300.0, gt=0)
    webhook_attempts: int = Field(default=12, ge=1)
    """Attempts per webhook before it is given up (the defaults span about half an hour)."""
    webhook_timeout: float = Field(default=10.0, gt=0)
    otel: bool = False
    """OpenTelemetry traces (the ``otel`` extra), configured by the standard ``OTEL_*``
    variables."""
    otel_content: bool = False
    """Put prompts and completions on the spans (off: only counts and names)."""
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "json"
    health_file: Path = Field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "agentloop-worker.health")
    """The heartbeat file a worker touches and ``agentloop health --worker`` reads."""

    @field_validator("processes")
    @classmethod
    def _processes_is_count(cls, value: str) -> str:
        process_count(value)
        return value.strip().lower()

    @field_validator("run_timeout", "default_max_tokens", mode="before")
    @classmethod
    def _off_is_zero(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("", "none", "off"):
            return 0
        return value

    @field_validator("subject_rate")
    @classmethod
    def _rate_is_n_per_window(cls, value: str) -> str:
        if value.strip():
            count, _, window = value.strip().partition("/")
            if not count.strip().isdigit() or int(count) < 1 or \
                    window.strip().lower() not in _WINDOWS:
                raise ValueError("AGENTLOOP_SUBJECT_RATE looks like 60/minute (second, minute "
                                 "or hour)")
        return value

    @field_validator("tenant_limits")
    @classmethod
    def _limits_are_json(cls, value: str) -> str:
        if value.strip():
            try:
                _LIMITS.validate_json(value)
            except ValidationError as exc:
                raise ValueError(f"AGENTLOOP_TENANT_LIMITS: {exc}") from None
        return value

    @field_validator("tenant_webhooks")
    @classmethod
    def _webhooks_are_json(cls, value: str) -> str:
        if value.strip():
            try:
                _webhook_table(value)
            except ValidationError as exc:
                raise ValueError(f"AGENTLOOP_TENANT_WEBHOOKS: {exc}") from None
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _secret_is_whsec(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("whsec_"):
            raise ValueError("AGENTLOOP_WEBHOOK_SECRET looks like whsec_<base64>")
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _servers_are_json(cls, value: str) -> str:
        if value.strip() and not isinstance(orjson.loads(value), dict):
            raise ValueError("AGENTLOOP_MCP_SERVERS must be a JSON object")
        return value

    @field_validator("openai_profiles")
    @classmethod
    def _profiles_are_json(cls, value: str) -> str:
        if value.strip():
            parsed = orjson.loads(value)
            if not isinstance(parsed, dict):
                raise ValueError("AGENTLOOP_OPENAI_PROFILES must be a JSON object")
        return value

    def api_key_map(self) -> dict[str, str]:
        """API key → tenant, from ``api_keys`` and ``api_keys_file`` (one ``key:tenant`` a line)."""
        entries = _split(self.api_keys)
        if self.api_keys_file is not None:
            lines = self.api_keys_file.read_text(encoding="utf-8").splitlines()
            entries += [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
        out: dict[str, str] = {}
        for entry in entries:
            key, sep, tenant = entry.rpartition(":")
            if not sep or not key or not tenant:
                raise ValueError("API keys must look like 'key:tenant'")
            out[key] = tenant
        return out

    def subject_rate_limit(self) -> tuple[int, float] | None:
        """``(requests, window seconds)`` of ``subject_rate``; None when unset."""
        if not self.subject_rate.strip():
            return None
        count, _, window = self.subject_rate.strip().partition("/")
        return int(count), _WINDOWS[window.strip().lower()]

    def cors_origin_list(self) -> list[str]:
        """Allowed CORS origins (``*`` allowed)."""
        return _split(self.cors_origins)

    def tool_module_list(self) -> list[str]:
        """Modules imported at start-up so their ``@function`` tools register."""
        return _split(self.tool_modules)

    def disabled_tool_list(self) -> list[str]:
        """Tool or toolset names the operator removed from every menu."""
        return _split(self.disabled_tools)

    def limits_for(self, tenant: str) -> TenantLimits | None:
        """The quotas of ``tenant``: its own entry in ``tenant_limits``, else ``*``'s."""
        if not self.tenant_limits.strip():
            return None
        table = _limits_table(self.tenant_limits)
        return table.get(tenant, table.get("*"))

    def tenant_webhook(self, tenant: str) -> str | None:
        """The default webhook of ``tenant``'s runs (its own entry, else ``*``'s); None while
        webhooks are off."""
        if not self.tenant_webhooks.strip() or self.webhook_secret is None:
            return None
        table = _webhook_table(self.tenant_webhooks)
        return table.get(tenant, table.get("*"))

    def webhook_allow_list(self) -> list[str]:
        """URL prefixes webhooks may target past the SSRF guard."""
        return _split(self.webhook_allow_urls)

    def mcp_server_map(self) -> dict[str, Any]:
        """The parsed ``mcp_servers`` (name → declaration)."""
        return orjson.loads(self.mcp_servers) if self.mcp_servers.strip() else {}

    def mcp_allow_url_list(self) -> list[str]:
        """URL patterns a run's own MCP servers must match."""
        return _split(self.mcp_allow_urls)

    def profile_map(self) -> dict[str, dict[str, Any]]:
        """The parsed ``openai_profiles``."""
        return orjson.loads(self.openai_profiles) if self.openai_profiles.strip() else {}


def process_count(value: str) -> int:
    """``--processes`` / ``AGENTLOOP_PROCESSES``: a whole number ≥ 1, or ``auto``: the CPU cores
    this process may use (its affinity, which a container's cpuset narrows). ValueError (a
    one-line reason) otherwise."""
    text = value.strip().lower()
    if text == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"processes must be a whole number of at least 1, or auto "
                         f"(got {value!r})")
    return int(text)


MULTIPROCESS_METRICS = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's multiprocess directory: set by the supervisor of ``agentloop serve
--processes N`` for its processes (``app.process.supervisor``)."""


def metrics_dir() -> str | None:
    """Where this process's metrics are shared with its siblings' (None: not shared)."""
    return os.environ.get(MULTIPROCESS_METRICS) or None


def process_environment(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides``: a child process's."""
    return {**os.environ, **overrides}


def provider_env() -> dict[str, str]:
    """Provider credentials and other variables tools may require: ``.env`` under the process
    environment (the process wins)."""
    env = {k: v for k, v in dotenv_values(".env").items() if v is not None} if Path(
        ".env").is_file() else {}
    env.update(os.environ)
    return env


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with keyword overrides (tests, the CLI)."""
    return Settings(**overrides)
