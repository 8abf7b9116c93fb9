"""Operations: ``/healthz`` (process up), ``/readyz`` (backend reachable; sandbox mode and
start-up probe), ``/metrics``."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from app.api.routes.deps import ServicesDep
from app.api.schemas import Health, SandboxProbe
from app.config import metrics_dir
from app.telemetry.metrics import metrics_response

router = APIRouter(tags=["operations"])
log = logging.getLogger(__name__)
PING_TIMEOUT = 2.0


@router.get("/healthz", response_model=Health, operation_id="getHealth",
            response_model_exclude_none=True)
async def healthz() -> Health:
    """The process is up (no dependency is checked)."""
    return Health(status="ok")


async def _backend_ok(svc: ServicesDep) -> bool:
    try:
        async with asyncio.timeout(PING_TIMEOUT):
            return await svc.backend.ping()
    except Exception as exc:  # any failure means "not ready", never a 500
        log.warning("readiness: backend ping failed: %s", exc)
        return False


@router.get("/readyz", response_model=Health, operation_id="getReadiness",
            responses={503: {"model": Health}})
async def readyz(svc: ServicesDep) -> JSONResponse:
    """Ready when the backend answers; also reports how code tools are sandboxed and what the
    start-up probe (one real sandboxed program) saw."""
    from tool_registry.builtin.sandbox import probe_result, sandbox_mode

    ok = await _backend_ok(svc)
    probe = probe_result()
    body = Health(status="ready" if ok else "unavailable", backend=svc.backend.name,
                  sandbox=str(sandbox_mode()),
                  sandbox_probe=SandboxProbe(**asdict(probe)) if probe else None)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, operation_id="getMetrics",
            responses={200: {"content": {"text/plain": {}}}})
async def metrics() -> Response:
    """Prometheus text exposition (under ``serve --processes N``: the sum over the processes)."""
    return metrics_response(metrics_dir())
