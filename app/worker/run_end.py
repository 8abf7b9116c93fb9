"""What follows a run's end, once its final fields are stored: its quota slot is given back
(``app.api.quotas``; only a run admitted under a limit holds one), its usage counted for the
day (``QuotaStore.accrue_usage``, once per run however many attempts get here) and in
``agentloop_tokens_total``, and its webhook queued (``app.worker.webhooks``). Every runner path
that ends a run gets here through ``runner._finish``, before the run's job is acknowledged: a
worker lost between the end and these steps leaves the job to another, whose attempt finds the
run ended and takes them again (each is idempotent), so no step is lost."""

from __future__ import annotations

import logging

from app.store.contract import Backend
from app.store.errors import BackendError
from app.store.quota_records import ADMITTED, Dimension, utc_day
from app.store.records import TERMINAL, RunRecord, now
from app.telemetry import metrics
from app.worker.sink import retrying
from app.worker.webhooks import queue_webhook

log = logging.getLogger(__name__)


async def after_end(backend: Backend, run_id: str, ended: RunRecord | None = None
                    ) -> RunRecord | None:
    """The steps above for the ended run ``run_id``; its record (None: gone, or not ended).
    ``ended``: the record as the caller just stored the end (saves reading it back)."""
    try:
        record = ended or await retrying(lambda: backend.get_run(run_id))
        if record is None or record.status not in TERMINAL:
            return None
        if record.request.get(ADMITTED):
            await retrying(lambda: backend.release_active(record.tenant, record.owner, run_id))
        await account(backend, record)
        await queue_webhook(backend, record, record.status)
        return record
    except BackendError as exc:
        log.warning("run %s: its quota, usage and webhook were not settled (%s)", run_id, exc)
        return None
    except Exception:  # never in the way of the run's ack (its job would come back forever)
        log.exception("run %s: settling its quota, usage and webhook failed", run_id)
        return None


async def account(backend: Backend, record: RunRecord) -> None:
    """Count the ended run's usage under its tenant, subject, agent and model, on the UTC day
    it ended; the Prometheus counter only the first time."""
    usage = record.usage
    values: dict[Dimension, str] = {"tenant": "", "subject": record.owner or "",
                                    "agent": str(record.request.get("agent") or ""),
                                    "model": record.model}
    counts = {"runs": 1, "input": usage.get("input_tokens", 0),
              "output": usage.get("output_tokens", 0),
              "cached": usage.get("cache_read_tokens", 0)}
    counts["tokens"] = counts["input"] + counts["output"]
    day = utc_day(record.ended_at or now())
    if await retrying(lambda: backend.accrue_usage(record.tenant, record.id, day, values,
                                                   counts)):
        metrics.record_tokens(record.model, usage)
