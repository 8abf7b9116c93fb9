"""The ``agentloop`` command.

    agentloop                       same as ``agentloop serve``
    agentloop serve [--host H] [--port P] [--no-worker]
                                    the HTTP API, with an embedded worker unless --no-worker
    agentloop worker                a worker only (scale these out beside ``serve --no-worker``)
    agentloop health [--worker] [--port P]
                                    exit 0 if this host's API answers /healthz (or, with
                                    --worker, if this host's worker heartbeat is fresh)

SIGTERM/SIGINT stop gracefully: uvicorn drains the API; the worker stops taking runs and
checkpoints and releases the ones it is driving so another worker resumes them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
from collections.abc import Sequence

import uvicorn

from app.config import Settings, load_settings
from app.delivery.draining import DrainingServer
from app.process.main import create_app
from app.process.services import open_services
from app.process.setup import check_tool_modules
from app.telemetry.logs import setup_logging

log = logging.getLogger(__name__)
GC_GEN0 = 20_000
"""Allocations (net of frees) between two young-generation collections (CPython's default
is 700)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentloop", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the HTTP API (and a worker)")
    serve.add_argument("--host", help="bind address (AGENTLOOP_HOST)")
    serve.add_argument("--port", type=int, help="port (AGENTLOOP_PORT)")
    serve.add_argument("--no-worker", action="store_true", help="API only; runs go to workers")
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


def health(settings: Settings, *, worker: bool, port: int | None) -> None:
    """Exit 0 when healthy, 1 otherwise (the reason on stderr)."""
    from app.process.liveness import check_api, check_worker

    ok, why = check_worker(settings) if worker else check_api(settings, port)
    if not ok:
        raise SystemExit(f"unhealthy: {why}")


def serve(settings: Settings, *, host: str | None, port: int | None, worker: bool) -> None:
    """Run the API under uvicorn (uvloop + httptools)."""
    app = create_app(settings, worker=worker)
    config = uvicorn.Config(app, host=host or settings.host, port=port or settings.port,
                            loop="uvloop", http="httptools", log_config=None,
                            proxy_headers=True, timeout_graceful_shutdown=30)
    tune_gc()
    DrainingServer(config).run()


async def _worker_main(settings: Settings) -> None:
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

    tune_gc()
    uvloop.run(_worker_main(settings))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentloop`` console script."""
    args = _parser().parse_args(argv)
    settings = load_settings()
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
        serve(settings, host=args.host, port=args.port, worker=not args.no_worker)
    else:
        serve(settings, host=None, port=None, worker=True)


if __name__ == "__main__":
    main()
