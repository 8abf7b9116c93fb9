"""Every Redis key and channel name the service uses (arq style: one place).

A run's keys share the hash tag ``{run_id}`` so per-run scripts stay single-slot on Redis
Cluster. Global names (the job stream, the notify channel, tenant indexes, idempotency keys)
are touched by separate commands, never inside a per-run script.

    al:{<run>}:run              hash    the RunRecord (values JSON) + attempt, last_seq, job,
                                        cancel, token, closed (the loop is ending)
    al:{<run>}:events           stream  the event log; entry id ``<seq>-0``, fields t, d
    al:{<run>}:ckpt             list    checkpointed messages (JSON), appended at message_end
    al:{<run>}:q:<kind>         list    waiting steer / follow_up messages (``<id>\\t<json>``)
    al:{<run>}:inflight:<kind>  list    taken, not yet injected
    al:{<run>}:taken            set     ids ever taken (withdraw answers 409 for these)
    al:tenant:<tenant>:runs     zset    run ids scored by created_at (listing, newest first)
    al:idem:<tenant>:<key>      string  ``<body hash>|<run id>``
    al:jobs                     stream  one entry per dispatch; consumer group ``workers``
    al:notify                   channel ``e:<run>`` new events, ``c:<run>`` cancel asked
"""

from __future__ import annotations

from app.queues import QueueKind

JOBS_STREAM = "al:jobs"
JOBS_GROUP = "workers"
NOTIFY_CHANNEL = "al:notify"


def run_key(run_id: str) -> str:
    """The run's record hash."""
    return f"al:{{{run_id}}}:run"


def events_key(run_id: str) -> str:
    """The run's event stream."""
    return f"al:{{{run_id}}}:events"


def checkpoint_key(run_id: str) -> str:
    """The run's checkpointed messages."""
    return f"al:{{{run_id}}}:ckpt"


def queue_key(run_id: str, kind: QueueKind) -> str:
    """Waiting messages of one queue."""
    return f"al:{{{run_id}}}:q:{kind}"


def inflight_key(run_id: str, kind: QueueKind) -> str:
    """Taken, not yet injected messages of one queue."""
    return f"al:{{{run_id}}}:inflight:{kind}"


def taken_key(run_id: str) -> str:
    """Ids of messages the loop took."""
    return f"al:{{{run_id}}}:taken"


def queue_keys(run_id: str) -> list[str]:
    """steer, follow_up, inflight steer, inflight follow_up, taken (the scripts' order)."""
    return [queue_key(run_id, "steer"), queue_key(run_id, "follow_up"),
            inflight_key(run_id, "steer"), inflight_key(run_id, "follow_up"), taken_key(run_id)]


def run_keys(run_id: str) -> list[str]:
    """All of a run's keys (expired together when it ends)."""
    return [run_key(run_id), events_key(run_id), checkpoint_key(run_id), *queue_keys(run_id)]


def tenant_runs_key(tenant: str) -> str:
    """The tenant's runs by creation time."""
    return f"al:tenant:{tenant}:runs"


def idempotency_key(tenant: str, key: str) -> str:
    """A tenant's Idempotency-Key."""
    return f"al:idem:{tenant}:{key}"
