"""Signed webhooks: a run's end (``run.completed``, ``run.failed``, ``run.cancelled``) and each
of its parkings (``run.requires_action``) become deliveries in the store's outbox
(``WebhookOutbox``), which every worker process sends from: at least once, signed per the
Standard Webhooks specification (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``:
``v1,<base64 HMAC-SHA256 of id.timestamp.body>`` with the ``whsec_`` secret; the signing is
the specification's own ``standardwebhooks`` package), under the SSRF guard unless
``AGENTLOOP_WEBHOOK_ALLOW_URLS`` allows the URL.

A failed attempt (no answer within the timeout, or any status but 2xx) is tried again after
``first_retry`` seconds, then twice as long each time, at most ``retry_cap`` (the defaults:
5, 10, 20, 40, 80, 160 s, then every 300 s), ``attempts`` tries in all; a URL the guard refuses
is not tried again. Each attempt is stored with its delivery (``GET /runs/{id}/webhooks``)::

    every EVERY s: claim due (leased) ─ POST each ─ 2xx: delivered
                                                  └ else: due again after the backoff, or
                                                    failed after the last attempt
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import orjson
from standardwebhooks.webhooks import Webhook

from app.store.contract import Backend
from app.store.errors import BackendError
from app.store.records import RunRecord, now
from app.store.webhook_records import WebhookAttempt, WebhookDelivery
from app.telemetry import metrics
from app.worker.sink import retrying
from providers import safe_fetch

log = logging.getLogger(__name__)
EVERY = 0.25
"""Seconds between two looks for due deliveries (when the last look found none)."""
BATCH = 32
"""Most deliveries one look takes."""
EVENT_TYPES = {"completed": "run.completed", "failed": "run.failed",
               "cancelled": "run.cancelled", "requires_action": "run.requires_action"}


@dataclass(slots=True, frozen=True, kw_only=True)
class WebhookSettings:
    """How deliveries are sent (``AGENTLOOP_WEBHOOK_*``)."""

    secret: str
    allow: tuple[str, ...] = ()
    """URL prefixes sent to even where the SSRF guard refuses (a private address)."""
    first_retry: float = 5.0
    retry_cap: float = 300.0
    attempts: int = 12
    timeout: float = 10.0

    def backoff(self, failed: int) -> float:
        """Seconds from the ``failed``-th failed attempt to the next."""
        return float(min(self.first_retry * 2 ** (failed - 1), self.retry_cap))

    def allowed(self, url: str) -> bool:
        """Whether ``url`` is on the allow list."""
        return any(url.startswith(prefix) for prefix in self.allow)


def delivery_of(record: RunRecord, status: str, at: float,
                occurrence: str = "") -> WebhookDelivery | None:
    """The delivery telling ``record``'s webhook the run is ``status`` (None: it names none);
    ``occurrence`` tells apart events a run may send more than once (its parkings)."""
    url = record.request.get("webhook")
    kind = EVENT_TYPES.get(status)
    if not url or kind is None:
        return None
    body = {"type": kind, "timestamp": datetime.fromtimestamp(at, UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "data": {"run_id": record.id, "thread_id": record.request.get("thread_id"),
                     "status": status, "stop_reason": record.stop_reason}}
    delivery_id = f"msg_{record.id}_{kind.removeprefix('run.')}" + (
        f"_{occurrence}" if occurrence else "")
    return WebhookDelivery(id=delivery_id, run_id=record.id, type=kind, url=str(url),
                           body=orjson.dumps(body).decode(), created_at=at)


async def queue_webhook(backend: Backend, record: RunRecord, status: str,
                        occurrence: str = "") -> None:
    """Put the run's ``status`` event in the outbox, if the run names a webhook (the store is
    retried for a while; then the event is logged as lost rather than failing the run)."""
    delivery = delivery_of(record, status, now(), occurrence)
    if delivery is None:
        return
    try:
        await retrying(lambda: backend.add_webhook(delivery))
    except BackendError as exc:
        log.error("run %s: its %s webhook was not queued (%s)", record.id, delivery.type, exc)


async def deliver_webhooks(backend: Backend, settings: WebhookSettings,
                           stop: asyncio.Event, every: float = EVERY) -> None:
    """Until ``stop`` is set: send the outbox's due deliveries (see the module docstring)."""
    signer = Webhook(settings.secret)
    lease = settings.timeout + 10.0
    async with httpx.AsyncClient(trust_env=False, timeout=settings.timeout) as client:
        while not stop.is_set():
            try:
                due = await backend.claim_webhooks(now(), lease, BATCH)
            except BackendError as exc:
                log.warning("webhooks: store unavailable (%s)", exc)
                due = []
            if due:
                await asyncio.gather(*(_attempt(backend, client, signer, settings, d)
                                       for d in due))
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)


async def _attempt(backend: Backend, client: httpx.AsyncClient, signer: Webhook,
                   settings: WebhookSettings, delivery: WebhookDelivery) -> None:
    at = now()
    attempt = WebhookAttempt(at=at)
    refused = False
    try:
        attempt.status = await safe_fetch.post(
            client, delivery.url, content=delivery.body.encode(),
            headers=_signed(signer, delivery, int(at)),
            allow_private=settings.allowed(delivery.url))
    except safe_fetch.FetchRefused as exc:
        attempt.error, refused = str(exc), True
    except (httpx.HTTPError, OSError, ValueError) as exc:
        attempt.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    delivery.attempts.append(attempt)
    ok = attempt.status is not None and 200 <= attempt.status < 300
    if ok or refused or len(delivery.attempts) >= settings.attempts:
        delivery.state, delivery.next_at = ("delivered" if ok else "failed"), None
    else:
        delivery.next_at = at + settings.backoff(len(delivery.attempts))
    metrics.WEBHOOK_ATTEMPTS.labels("ok" if ok else "refused" if refused else "failed").inc()
    if not ok:
        log.info("webhook %s of run %s: attempt %d failed (%s)", delivery.id, delivery.run_id,
                 len(delivery.attempts), attempt.error or attempt.status)
    try:
        await retrying(lambda: backend.webhook_attempted(delivery))
    except BackendError as exc:  # its lease passes and another look sends it again
        log.warning("webhook %s: attempt not stored (%s)", delivery.id, exc)


def _signed(signer: Webhook, delivery: WebhookDelivery, timestamp: int) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (its own timestamp, the same id)."""
    signature = signer.sign(delivery.id, datetime.fromtimestamp(timestamp, UTC), delivery.body)
    return {"webhook-id": delivery.id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature, "content-type": "application/json",
            "user-agent": "agentloop-webhooks"}
