"""``WebhookOutbox`` on Redis: each run's deliveries in a hash of its own slot (expiring with
the run), and one zset of due deliveries for every worker to claim from (``CLAIM_WEBHOOKS``:
atomic, so two workers never take the same delivery within a lease). It survives a restart of
every process: a delivery stays due until an attempt settles it.

A delivery is written before it is made due and settled before it leaves the due set, so a
process lost between the two steps leaves at worst a due member whose delivery is already
settled (dropped when claimed) or a delivery its run's end writes again (``add`` is
idempotent)."""

from __future__ import annotations

from typing import Any

from app.store.redis import keys
from app.store.redis.core import RedisCore
from app.store.redis.errors import guard
from app.store.webhook_records import WebhookDelivery


def _member(run_id: str, delivery_id: str) -> str:
    return f"{run_id} {delivery_id}"


class RedisWebhooks(RedisCore):
    """See ``app.store.contract.WebhookOutbox``."""

    @guard
    async def add_webhook(self, delivery: WebhookDelivery) -> bool:
        """See ``WebhookOutbox.add_webhook``."""
        delivery.next_at = delivery.next_at or delivery.created_at
        key = keys.webhooks_key(delivery.run_id)
        added, _ = await self._commands(("HSETNX", key, delivery.id, delivery.encode()),
                                        ("EXPIRE", key, str(int(self.run_ttl))))
        if not int(added):
            return False
        await self._commands(("ZADD", keys.WEBHOOKS_DUE, "NX", repr(delivery.next_at),
                              _member(delivery.run_id, delivery.id)))
        return True

    @guard
    async def claim_webhooks(self, at: float, lease: float, limit: int
                             ) -> list[WebhookDelivery]:
        """See ``WebhookOutbox.claim_webhooks``."""
        members: Any = await self._run("CLAIM_WEBHOOKS", [keys.WEBHOOKS_DUE],
                                       [repr(at), repr(at + lease), limit])
        if not members:
            return []
        pairs = [(m.decode() if isinstance(m, bytes) else str(m)).split(" ", 1)
                 for m in members]
        raws = await self._commands(*[("HGET", keys.webhooks_key(run_id), delivery_id)
                                      for run_id, delivery_id in pairs])
        out: list[WebhookDelivery] = []
        gone: list[str] = []
        for (run_id, delivery_id), raw in zip(pairs, raws, strict=True):
            delivery = None if raw is None else WebhookDelivery.decode(raw)
            if delivery is None or delivery.state != "pending":  # expired with its run, or
                gone.append(_member(run_id, delivery_id))        # settled by a lost worker
            else:
                out.append(delivery)
        if gone:
            await self._commands(("ZREM", keys.WEBHOOKS_DUE, *gone))
        return out

    @guard
    async def webhook_attempted(self, delivery: WebhookDelivery) -> None:
        """See ``WebhookOutbox.webhook_attempted``."""
        member = _member(delivery.run_id, delivery.id)
        await self._commands(("HSET", keys.webhooks_key(delivery.run_id), delivery.id,
                              delivery.encode()))
        if delivery.state == "pending" and delivery.next_at is not None:
            await self._commands(("ZADD", keys.WEBHOOKS_DUE, repr(delivery.next_at), member))
        else:
            await self._commands(("ZREM", keys.WEBHOOKS_DUE, member))

    @guard
    async def run_webhooks(self, run_id: str) -> list[WebhookDelivery]:
        """See ``WebhookOutbox.run_webhooks``."""
        (raw,) = await self._commands(("HVALS", keys.webhooks_key(run_id)))
        found = [WebhookDelivery.decode(v) for v in raw or []]
        return sorted(found, key=lambda d: d.created_at)
