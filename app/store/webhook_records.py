"""The webhook outbox's records (``app.store.contract.WebhookOutbox``): one ``WebhookDelivery``
per event a run sends, its attempts kept with it (``GET /runs/{id}/webhooks``).

A delivery is due at ``next_at``; a worker that claims it moves ``next_at`` a lease ahead, so
no other worker sends it meanwhile, and a worker that dies mid-send leaves it due again once
the lease passes (at least once)::

    add ─ due ─ claim (next_at = now + lease) ─ POST ─ 2xx: delivered
                                                     └ else: attempted, due again after the
                                                       backoff, or failed after the last attempt
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import orjson

DeliveryState = Literal["pending", "delivered", "failed"]


@dataclass(slots=True, kw_only=True)
class WebhookAttempt:
    """One try: when, the receiver's HTTP status (None: no answer) and what went wrong."""

    at: float
    status: int | None = None
    error: str | None = None


@dataclass(slots=True, kw_only=True)
class WebhookDelivery:
    """One event of one run for one URL; ``id`` is its ``webhook-id`` (the same on every
    attempt, so a receiver drops repeats) and ``body`` the exact bytes signed."""

    id: str
    run_id: str
    type: str
    url: str
    body: str
    created_at: float
    state: DeliveryState = "pending"
    next_at: float | None = None
    attempts: list[WebhookAttempt] = field(default_factory=list)

    def encode(self) -> bytes:
        """As stored (JSON)."""
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, raw: bytes | str) -> WebhookDelivery:
        """The stored form back."""
        data: dict[str, Any] = orjson.loads(raw)
        data["attempts"] = [WebhookAttempt(**a) for a in data.get("attempts", [])]
        return cls(**data)
