"""``WebhookOutbox`` on every backend: a delivery is added once, claimed by one worker per
lease, due again after a failed attempt and settled by a good one (issue 32)."""

from __future__ import annotations

import time

from app.store import Backend
from app.store.records import RunRecord
from app.store.webhook_records import WebhookAttempt, WebhookDelivery


def delivery(run_id: str, kind: str, at: float) -> WebhookDelivery:
    return WebhookDelivery(id=f"msg_{kind}", run_id=run_id, type=kind, url="http://x/hook",
                           body=f'{{"type": "{kind}"}}', created_at=at)


async def test_add_claim_retry_and_settle(backend: Backend) -> None:
    run = RunRecord(id="run_" + "a" * 32, tenant="t", created_at=time.time())
    await backend.create_run(run)
    now = time.time()
    assert await backend.add_webhook(delivery(run.id, "run.completed", now)) is True
    assert await backend.add_webhook(delivery(run.id, "run.completed", now)) is False
    claimed = await backend.claim_webhooks(now + 0.001, 30.0, 10)
    assert [d.id for d in claimed] == ["msg_run.completed"]
    assert await backend.claim_webhooks(now + 1, 30.0, 10) == []  # leased to the first
    assert [d.id for d in await backend.claim_webhooks(now + 31, 30.0, 10)] == [
        "msg_run.completed"]  # the lease passed: that worker is taken for dead
    one = claimed[0]
    one.attempts.append(WebhookAttempt(at=now, status=500))
    one.next_at = now + 100
    await backend.webhook_attempted(one)
    assert await backend.claim_webhooks(now + 99, 30.0, 10) == []
    again = await backend.claim_webhooks(now + 100, 30.0, 10)
    assert [len(d.attempts) for d in again] == [1]
    again[0].attempts.append(WebhookAttempt(at=now + 100, status=204))
    again[0].state, again[0].next_at = "delivered", None
    await backend.webhook_attempted(again[0])
    assert await backend.claim_webhooks(now + 10_000, 30.0, 10) == []
    (stored,) = await backend.run_webhooks(run.id)
    assert stored.state == "delivered" and [a.status for a in stored.attempts] == [500, 204]
    assert await backend.run_webhooks("run_" + "b" * 32) == []

