"""One API process of ``agentloop serve --processes N`` (started by ``app.process.supervisor``).

It is ``agentloop serve`` on a socket it inherits: the same app (``create_app``, with its
embedded worker unless ``--no-worker``), the same uvicorn (uvloop, httptools,
``DrainingServer``: SIGTERM drains it as it drains one process), the same collector tuning.
Beyond that it:

- tells the supervisor on its status pipe once it serves (``R``), or why it could not start
  (``F<reason>``: the exception its lifespan raised), then closes the pipe;
- logs its pid on every line (the processes share one log);
- names its worker ``<AGENTLOOP_WORKER_NAME>-<pid>`` when a name is configured (N workers of
  one name would share one liveness key);
- stops (SIGTERM, so it drains) if the supervisor dies, rather than outliving it (Linux).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI

from app.config import load_settings
from app.delivery.draining import DrainingServer
from app.process.cli import tune_gc, uvicorn_config
from app.process.main import create_app
from app.telemetry.logs import setup_logging

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1


class ChildServer(DrainingServer):
    """``DrainingServer`` that says on ``status_fd`` when it serves."""

    def __init__(self, config: uvicorn.Config, status_fd: int) -> None:
        super().__init__(config)
        self.status_fd = status_fd

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.tell(b"R")

    def tell(self, message: bytes) -> None:
        """Write ``message`` to the supervisor and close the pipe (once)."""
        if self.status_fd < 0:
            return
        with contextlib.suppress(OSError):  # the supervisor is gone
            os.write(self.status_fd, message)
        os.close(self.status_fd)
        self.status_fd = -1


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):  # our one-line configuration errors
        return str(exc.code)
    return f"{type(exc).__name__}: {exc}"


def _note_start_failure(app: FastAPI, reasons: list[str]) -> None:
    """Wrap the app's lifespan so the exception that stops its start-up is kept in
    ``reasons`` (uvicorn logs it, then exits 3)."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(target: Any) -> AsyncIterator[Any]:
        async with AsyncExitStack() as stack:
            try:
                state = await stack.enter_async_context(inner(target))
            except BaseException as exc:
                reasons.append(_describe(exc))
                raise
            yield state

    app.router.lifespan_context = lifespan


def _follow_parent(parent: int) -> None:
    """SIGTERM when the supervisor dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        raise SystemExit("agentloop: the supervisor has exited")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m app.process.child",
                                     description="one process of agentloop serve --processes")
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--status-fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--no-worker", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Serve on the inherited socket until SIGTERM/SIGINT."""
    args = _parser().parse_args(argv)
    for fd in (args.socket_fd, args.status_fd):  # not into the sandbox's or MCP's processes
        os.set_inheritable(fd, False)
    _follow_parent(args.parent)
    settings = load_settings()  # the supervisor has checked them
    setup_logging(settings.log_level, settings.log_format, pid=True)
    if settings.worker_name:
        settings = settings.model_copy(
            update={"worker_name": f"{settings.worker_name}-{os.getpid()}"})
    sock = socket.socket(fileno=args.socket_fd)
    reasons: list[str] = []
    app = create_app(settings, worker=not args.no_worker)
    _note_start_failure(app, reasons)
    server = ChildServer(uvicorn_config(app, settings.host, settings.port), args.status_fd)
    tune_gc()
    try:
        server.run(sockets=[sock])
    except BaseException as exc:
        if not server.started:
            server.tell(b"F" + (reasons[0] if reasons else _describe(exc)).encode())
        raise


if __name__ == "__main__":
    main()
