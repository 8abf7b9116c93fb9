"""The ``agentloop`` command.

    agentloop                       same as ``agentloop serve``
    agentloop serve [--host H] [--port P] [--no-worker] [--processes N|auto]
                                    the HTTP API, with an embedded worker unless --no-worker;
                                    N > 1: N such processes on the one port (needs Redis)
    agentloop worker                a worker only (scale these out beside ``serve --no-worker``)
    agentloop health [--worker] [--port P]
                                    exit 0 if this host's API answers /healthz (or, with
                                    --worker, if this host's worker heartbeat is fresh)

SIGTERM/SIGINT stop gracefully: uvicorn drains the API; the worker stops taking runs and
checkpoints and releases the ones it is driving so another worker resumes them. With
``--processes N`` a supervisor (``app.process.supervisor``) passes the signal on to each
process and exits once they all have.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import resource
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from app.config import Settings, load_settings, process_count
from app.telemetry.logs import setup_logging

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

# The API, the worker and uvicorn are imported by the commands that run them, not at the top:
# `agentloop health` is the container health check Docker runs every 15 s, and importing the
# whole service for it (1.7 s of CPU per check on our 2-core test host) cost ~11 % of a core.

log = logging.getLogger(__name__)
ACCEPT_LOOP = "app.process.accept_loop:new_event_loop"
"""uvicorn's ``loop``: uvloop accepting new connections in batches (``accept_loop``)."""
GC_GEN0 = 20_000
"""Allocations (net of frees) between two young-generation collections (CPython's default
is 700)."""
GRACEFUL_SHUTDOWN = 30.0
"""uvicorn's ``timeout_graceful_shutdown``: how long open responses may take to finish once a
stop is asked."""
STOP_MARGIN = 10.0
"""A supervisor's allowance beyond that (and the worker's hand-back, up to a lease) before it
kills a process that has not exited."""


def _processes(value: str) -> int:
    try:
        return process_count(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentloop", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the HTTP API (and a worker)")
    serve.add_argument("--host", help="bind address (AGENTLOOP_HOST)")
    serve.add_argument("--port", type=int, help="port (AGENTLOOP_PORT)")
    serve.add_argument("--no-worker", action="store_true", help="API only; runs go to workers")
    serve.add_argument("--processes", type=_processes, metavar="N|auto",
                       help="API processes on the port, each with its worker unless "
                            "--no-worker; auto: one per CPU core (AGENTLOOP_PROCESSES; default 1)")
    sub.add_parser("worker", help="run a worker only")
    health = sub.add_parser("health", help="container health check (exit 0 when healthy)")
    health.add_argument("--worker", action="store_true", help="check this host's worker")
    health.add_argument("--port", type=int, help="the API's port (AGENTLOOP_PORT)")
    return parser


def tune_gc() -> None:
    """Move everything built so far (modules, pydantic models, routes: hundreds of thousands
    of objects) out of the collector's sight, and collect the young generation less often.

    Every full collection walked all of those objects again; with runs streaming, allocations
    set collections off many times a second (py-spy: the collector showed as 15 % of the
    server's samples, charged to whatever line allocated). Garbage is still collected: cycles
    among objects made after this are found as before."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0, *gc.get_threshold()[1:])


def raise_open_files() -> None:
    """The soft limit of open files up to the hard one, for this process and the ones it
    starts. Every open stream holds a socket; the usual soft limit (1024 under systemd and
    many shells) would have a few hundred browsers make the process refuse every new
    connection, while the hard limit is usually far higher. (Go's runtime does the same.)"""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open files limit: %s", exc)


def health(settings: Settings, *, worker: bool, port: int | None) -> None:
    """Exit 0 when healthy, 1 otherwise (the reason on stderr)."""
    from app.process.liveness import check_api, check_worker

    ok, why = check_worker(settings) if worker else check_api(settings, port)
    if not ok:
        raise SystemExit(f"unhealthy: {why}")


def uvicorn_config(app: FastAPI, host: str, port: int) -> uvicorn.Config:
    """How the API is served: uvloop accepting in batches (``accept_loop``), httptools, our
    logging, a bounded graceful stop."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, loop=ACCEPT_LOOP, http="httptools",
                          log_config=None, proxy_headers=True,
                          timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN))


def serve(settings: Settings, *, host: str | None, port: int | None, worker: bool,
          processes: int = 1) -> None:
    """Run the API under uvicorn (uvloop + httptools); ``processes`` > 1: that many, under a
    supervisor (``app.process.supervisor``)."""
    host, port = host or settings.host, port or settings.port
    raise_open_files()  # the supervisor's children inherit it
    if processes > 1:
        if not settings.redis_url:
            raise SystemExit(f"agentloop serve: {processes} processes need Redis "
                             "(AGENTLOOP_REDIS_URL): with the in-memory backend a run created "
                             "in one process is invisible to the others")
        from app.process.supervisor import supervise

        supervise(settings, host=host, port=port, worker=worker, processes=processes,
                  stop_within=GRACEFUL_SHUTDOWN + settings.lease_seconds + STOP_MARGIN)
        return
    from app.delivery.draining import DrainingServer
    from app.process.main import create_app

    app = create_app(settings, worker=worker)
    config = uvicorn_config(app, host, port)
    tune_gc()
    DrainingServer(config).run()


def check_tool_modules(settings: Settings) -> None:
    """``app.process.setup.check_tool_modules``: the tool modules import, else one line and
    exit 1."""
    from app.process.setup import check_tool_modules as check

    check(settings)


async def _worker_main(settings: Settings) -> None:
    from app.process.services import open_services

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with open_services(settings, worker=True) as services:
        from app.process.liveness import beat

        heartbeat = asyncio.create_task(beat(services.backend, settings.health_file,
                                             min(settings.heartbeat_seconds, 10.0)))
        stopped = asyncio.create_task(stop.wait())
        waiting: set[asyncio.Task[object]] = {stopped}
        if services.worker is not None:
            waiting.add(services.worker)
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        heartbeat.cancel()
        log.info("worker stopping: releasing running runs")


def run_worker_process(settings: Settings) -> None:
    """Run a worker until SIGTERM/SIGINT."""
    import uvloop

    raise_open_files()
    tune_gc()
    uvloop.run(_worker_main(settings))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentloop`` console script."""
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
    except ValidationError as exc:  # one line per bad setting, not a traceback
        raise SystemExit("agentloop: invalid settings: " + "; ".join(
            f"AGENTLOOP_{'_'.join(map(str, e['loc'])).upper()}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors())) from None
    setup_logging(settings.log_level, settings.log_format)
    if args.command == "health":
        health(settings, worker=args.worker, port=args.port)
        return
    check_tool_modules(settings)  # one line and exit 1, before uvicorn folds a traceback
    if args.command == "worker":
        if not settings.redis_url:
            raise SystemExit("agentloop worker: set AGENTLOOP_REDIS_URL; without Redis a worker "
                             "has no runs to take (`agentloop serve` embeds one)")
        run_worker_process(settings)
    elif args.command == "serve":
        serve(settings, host=args.host, port=args.port, worker=not args.no_worker,
              processes=args.processes or process_count(settings.processes))
    else:
        serve(settings, host=None, port=None, worker=True,
              processes=process_count(settings.processes))


if __name__ == "__main__":
    main()
