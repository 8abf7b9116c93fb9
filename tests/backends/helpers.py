"""Small builders shared by the contract tests."""

from __future__ import annotations

import itertools
import time

from app.engine.queues import QueuedMessage
from app.store import Backend, Claim, EventBatch, RunRecord
from providers.messages import UserMessage

_ids = itertools.count(1)


def record(tenant: str = "t1", **fields: object) -> RunRecord:
    n = next(_ids)
    base: dict[str, object] = {"id": f"run_{n}_{time.time_ns()}", "tenant": tenant,
                               "model": "fake:m", "created_at": time.time() + n * 1e-6,
                               "request": {"model": "fake:m", "input": "hi"}}
    base.update(fields)
    return RunRecord(**base)  # type: ignore[arg-type]


def body(text: str) -> bytes:
    return b'{"run_id":"r","ts":"t","type":"x","text":"%s"}' % text.encode()


def batch(*texts: str, **kw: object) -> EventBatch:
    return EventBatch(events=[("x", body(t)) for t in texts], **kw)  # type: ignore[arg-type]


def msg(mid: str, text: str = "") -> QueuedMessage:
    return QueuedMessage(id=mid, message=UserMessage(content=text or mid))


async def created_and_claimed(backend: Backend, worker: str = "w1") -> Claim:
    rec, _ = await backend.create_run(record())
    claim = await backend.claim(worker, timeout=2)
    assert claim is not None and claim.run_id == rec.id
    return claim
