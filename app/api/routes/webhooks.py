"""``GET /runs/{run_id}/webhooks``: the run's webhook deliveries and every attempt of each
(``app.worker.webhooks``), for whoever may read the run."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.api.errors import documented
from app.api.routes.deps import PrincipalDep, ServicesDep
from app.api.run_view import load_run, rfc3339
from app.store.webhook_records import WebhookDelivery

router = APIRouter(tags=["runs"])


class WebhookAttemptView(BaseModel):
    """One try of a delivery."""

    at: str | None
    status: int | None = Field(description="the receiver's HTTP status; null: no answer")
    error: str | None = Field(description="why it failed without a status (a timeout, a "
                              "refused connection, a URL the SSRF guard refuses)")


class WebhookDeliveryView(BaseModel):
    """One event sent to the run's webhook."""

    id: str = Field(description="its webhook-id header, the same on every attempt")
    type: Literal["run.completed", "run.failed", "run.cancelled", "run.requires_action"]
    url: str
    state: Literal["pending", "delivered", "failed"]
    created_at: str | None
    next_attempt_at: str | None = Field(description="while pending: when it is tried next")
    attempts: list[WebhookAttemptView]


class WebhookList(BaseModel):
    """``GET /runs/{run_id}/webhooks``: oldest first."""

    webhooks: list[WebhookDeliveryView]


def _view(d: WebhookDelivery) -> WebhookDeliveryView:
    return WebhookDeliveryView(
        id=d.id, type=d.type, url=d.url, state=d.state,  # type: ignore[arg-type]
        created_at=rfc3339(d.created_at),
        next_attempt_at=rfc3339(d.next_at) if d.state == "pending" else None,
        attempts=[WebhookAttemptView(at=rfc3339(a.at), status=a.status, error=a.error)
                  for a in d.attempts])


@router.get("/runs/{run_id}/webhooks", response_model=WebhookList,
            operation_id="listRunWebhooks", responses=documented(401, 404, 503))
async def list_run_webhooks(run_id: str, svc: ServicesDep, who: PrincipalDep) -> WebhookList:
    """The run's webhook deliveries, each with its attempts."""
    await load_run(svc.backend, run_id, who)
    return WebhookList(webhooks=[_view(d) for d in await svc.backend.run_webhooks(run_id)])
