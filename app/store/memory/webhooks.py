"""``WebhookOutbox`` of the in-process backend: deliveries kept in the process (lost with it,
like everything of this backend), stored encoded so no caller shares a record with the store."""

from __future__ import annotations

from app.store.memory.core import MemoryCore
from app.store.webhook_records import WebhookDelivery


class MemoryWebhooks(MemoryCore):
    """See ``app.store.contract.WebhookOutbox``."""

    async def add_webhook(self, delivery: WebhookDelivery) -> bool:
        """See ``WebhookOutbox.add_webhook``."""
        stored = self._webhooks.setdefault(delivery.run_id, {})
        if delivery.id in stored:
            return False
        delivery.next_at = delivery.next_at or delivery.created_at
        stored[delivery.id] = delivery.encode()
        self._webhooks_due[(delivery.run_id, delivery.id)] = delivery.next_at
        return True

    async def claim_webhooks(self, at: float, lease: float, limit: int
                             ) -> list[WebhookDelivery]:
        """See ``WebhookOutbox.claim_webhooks``."""
        due = sorted((t, key) for key, t in self._webhooks_due.items() if t <= at)[:limit]
        out: list[WebhookDelivery] = []
        for _, (run_id, delivery_id) in due:
            raw = self._webhooks.get(run_id, {}).get(delivery_id)
            if raw is None or self._record(run_id) is None:  # the run expired: so did it
                self._webhooks_due.pop((run_id, delivery_id), None)
                self._webhooks.pop(run_id, None)
                continue
            self._webhooks_due[(run_id, delivery_id)] = at + lease
            out.append(WebhookDelivery.decode(raw))
        return out

    async def webhook_attempted(self, delivery: WebhookDelivery) -> None:
        """See ``WebhookOutbox.webhook_attempted``."""
        key = (delivery.run_id, delivery.id)
        self._webhooks.setdefault(delivery.run_id, {})[delivery.id] = delivery.encode()
        if delivery.state == "pending" and delivery.next_at is not None:
            self._webhooks_due[key] = delivery.next_at
        else:
            self._webhooks_due.pop(key, None)

    async def run_webhooks(self, run_id: str) -> list[WebhookDelivery]:
        """See ``WebhookOutbox.run_webhooks``."""
        found = [WebhookDelivery.decode(raw) for raw in self._webhooks.get(run_id, {}).values()]
        return sorted(found, key=lambda d: d.created_at)
