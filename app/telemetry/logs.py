"""Logging set-up: one JSON object per line (or plain text), carrying ``run_id`` and ``tenant``.

``bind(run_id=..., tenant=...)`` sets them for the current task (a context variable, so the
worker's concurrent runs and concurrent requests do not mix); tasks and worker threads started
inside inherit them. ``log.info(..., extra={"run_id": ...})`` works too. Where they are bound:

- a worker driving a run: ``runner.run_claim`` (the loop, tools, provider retries, the event
  sink and the cancel watcher all run in tasks it starts);
- a request about a run (``/runs/{id}/...``): ``RunLogContext``, an ASGI middleware, for the
  whole exchange, streaming and uvicorn's access line included;
- ``POST /runs``: the route, once the run exists.

Under ``agentloop serve --processes N`` (N > 1) every line also says which process wrote it
(``pid``): ``setup_logging(..., pid=True)``.

API keys are never passed to a logger; stream tokens are scrubbed from every formatted line,
uvicorn's access log included (``app.telemetry.redact``).
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from app.telemetry.redact import redact

_FIELDS = ("run_id", "tenant")
_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "agentloop_log", default=None)


@contextmanager
def bind(**fields: str | None) -> Iterator[None]:
    """Attach ``run_id``/``tenant`` to every record logged inside the block."""
    token = _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _context.reset(token)


_RUN_PATH = re.compile(r"^/runs/([A-Za-z0-9_-]{1,128})(?:/|$)")

TenantOf = Callable[[Scope, str], str | None]
"""The tenant of a request about run ``run_id`` (None when its credentials do not resolve)."""


class RunLogContext:
    """ASGI middleware binding ``run_id`` (from the path) and ``tenant`` (``tenant_of``) for
    the whole of a request about one run."""

    def __init__(self, app: ASGIApp, tenant_of: TenantOf | None = None) -> None:
        self.app = app
        self.tenant_of = tenant_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _RUN_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        run_id = match.group(1)
        tenant = self.tenant_of(scope, run_id) if self.tenant_of else None
        with bind(run_id=run_id, tenant=tenant):
            await self.app(scope, receive, send)


class ContextFilter(logging.Filter):
    """Copies the bound fields onto each record (an explicit ``extra`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", "pid"?, "run_id"?, "tenant"?, "exc"?}``."""

    def __init__(self, *, pid: bool = False) -> None:
        super().__init__()
        self.pid = pid

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.pid:
            out["pid"] = record.process
        for key in _FIELDS:
            value = getattr(record, key, None)
            if value:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return redact(orjson.dumps(out, default=str).decode())


class TextFormatter(logging.Formatter):
    """Human-readable lines with the bound fields appended (and the pid, with ``pid``)."""

    def __init__(self, *, pid: bool = False) -> None:
        super().__init__("%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s" if pid
                         else "%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={getattr(record, k)}" for k in _FIELDS if getattr(record, k, None))
        return redact(f"{line} [{extra}]" if extra else line)


def setup_logging(level: str = "INFO", fmt: str = "json", *, pid: bool = False) -> None:
    """Configure the root logger (and uvicorn's) once per process; ``pid``: every line says
    which process wrote it (several processes share one log)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(pid=pid) if fmt == "json" else TextFormatter(pid=pid))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
