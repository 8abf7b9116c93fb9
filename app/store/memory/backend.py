"""The in-process backend: one process, nothing to install (the default without Redis).

``MemoryBackend`` is its four parts over one state (``app.store.memory.core``): runs, logs,
cancel and dispatch (``runs``), queues (``queues``), parked runs (``parking``), threads
(``threads``, ``thread_reads``), agents (``agents``), quotas and usage (``quotas``) and the
webhook outbox (``webhooks``).
"""

from __future__ import annotations

from app.store.memory.agents import MemoryAgents
from app.store.memory.parking import MemoryParking
from app.store.memory.queues import MemoryQueues
from app.store.memory.quotas import MemoryQuotas
from app.store.memory.runs import MemoryRuns
from app.store.memory.threads import MemoryThreads
from app.store.memory.webhooks import MemoryWebhooks


class MemoryBackend(MemoryThreads, MemoryParking, MemoryQueues, MemoryAgents, MemoryQuotas,
                    MemoryWebhooks, MemoryRuns):
    """The in-process ``Backend``. ``lease``: seconds a claim lasts without a heartbeat;
    ``run_ttl``: seconds a finished run is kept."""
