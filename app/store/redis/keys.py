"""Every Redis key and channel name the service uses (arq style: one place).

A run's keys share the hash tag ``{run_id}`` so per-run scripts stay single-slot on Redis
Cluster; a run of a thread (``run_<hex>_thr_<hex>``) has the hash tag ``{thr_<hex>}`` of its
thread instead, so a thread and all its runs sit in one slot and a thread script touches
only that slot. Global names (the job stream, the notify channel, tenant indexes, run
idempotency keys) are touched by separate commands, never inside a per-run script.

    al:{<run>}:run              hash    the RunRecord (values JSON) + attempt, last_seq, job,
                                        cancel, token, closed (the loop is ending)
    al:{<run>}:events           stream  the event log; entry id ``<seq>-0``, fields t, d
    al:{<run>}:ckpt             list    checkpointed messages (JSON), appended at message_end
    al:{<run>}:q:<kind>         list    waiting steer / follow_up messages (``<id>\\t<json>``)
    al:{<run>}:inflight:<kind>  list    taken, not yet injected
    al:{<run>}:taken            set     ids ever taken (withdraw answers 409 for these)
    al:{<run>}:parked           hash    calls (JSON), deadline, expired: what a parked run
                                        waits for (``app.store.parking``)
    al:{<run>}:decisions        hash    tool_call_id → decision JSON
    al:parked                   zset    parked runs with an approval deadline, by deadline
    al:{<thr>}:<run>:run, …     the same keys of a thread's run, in its thread's slot, plus
    al:{<thr>}:<run>:input      list    the run's prompts (JSON messages), read at its start
    al:{<thr>}:thread           hash    the thread: id, tenant, created_at, updated_at,
                                        metadata (JSON), active_run, next_run ('' = none)
    al:{<thr>}:msgs             list    the thread's history (JSON messages) of ended runs
    al:{<thr>}:runs             list    the thread's run ids, oldest first
    al:{<thr>}:idem:<key>       string  ``<body hash>|<outcome>`` of an Idempotency-Key
    al:tenant:<tenant>:runs     zset    run ids scored by created_at (listing, newest first)
    al:tenant:<tenant>:threads  zset    thread ids scored by created_at
    al:idem:<tenant>:<key>      string  ``<body hash>|<run id>``
    al:{quota:<t>}:active[:s:<subject>]  zset  the tenant's (an end user's) active runs, scored
                                        by when each was admitted (ms)
    al:{quota:<t>}:rate[:s:<subject>]    zset  runs admitted in the last minute, by time (ms)
    al:{quota:<t>}:usage:<day>  hash    ``<dimension>\x1f<value>\x1f<metric>`` → count (a UTC
                                        day's usage: ``app.store.quota_records``)
    al:{quota:<t>}:accrued:<day> set    runs whose usage that day holds (counted once)
    al:{<run>}:webhooks         hash    the run's webhook deliveries: id → JSON (attempts with them)
    al:webhooks:due             zset    ``<run id> <delivery id>`` by when it is due (a claim
                                        moves it a lease ahead)
    al:jobs                     stream  one entry per dispatch; consumer group ``workers``
    al:{workers}:<name>         string  present while the worker lives (PX lease, renewed by
                                        its heartbeat); its pending jobs are taken once it lapses.
                                        One hash tag for all, so one MGET reads them on a Cluster
    al:notify                   channel ``e:<run>`` new events, ``c:<run>`` cancel asked
    al:{<run>}:notes            shard channel: the same notes on Redis Cluster (SPUBLISH), one
                                per run, so only the processes following the run receive them
                                (a thread's run: ``al:{<thr>}:<run>:notes``)

On Redis Cluster ``al:jobs`` is one key on one master; redis_cluster.py says why.
"""

from __future__ import annotations

from app.engine.queues import QueueKind
from app.store.ids import thread_of_run

JOBS_STREAM = "al:jobs"
DISPATCH_MARKS = "{al:jobs}:marks"
"""Cluster: runs a step may queue, marked before it and unmarked with their job (in the job
stream's slot: the hash tag ``al:jobs`` is the stream's own key); ``RedisCore._mark``."""
JOBS_GROUP = "workers"
NOTIFY_CHANNEL = "al:notify"
PARKED_INDEX = "al:parked"
WEBHOOKS_DUE = "al:webhooks:due"


def _prefix(run_id: str) -> str:
    """``al:{<run>}:``, or ``al:{<thread>}:<run>:`` for a run of a thread (its slot)."""
    thread = thread_of_run(run_id)
    return f"al:{{{thread}}}:{run_id}:" if thread else f"al:{{{run_id}}}:"


def run_key(run_id: str) -> str:
    """The run's record hash."""
    return _prefix(run_id) + "run"


def events_key(run_id: str) -> str:
    """The run's event stream."""
    return _prefix(run_id) + "events"


def checkpoint_key(run_id: str) -> str:
    """The run's checkpointed messages."""
    return _prefix(run_id) + "ckpt"


def queue_key(run_id: str, kind: QueueKind) -> str:
    """Waiting messages of one queue."""
    return _prefix(run_id) + f"q:{kind}"


def inflight_key(run_id: str, kind: QueueKind) -> str:
    """Taken, not yet injected messages of one queue."""
    return _prefix(run_id) + f"inflight:{kind}"


def taken_key(run_id: str) -> str:
    """Ids of messages the loop took."""
    return _prefix(run_id) + "taken"


def parked_key(run_id: str) -> str:
    """What the parked run waits for."""
    return _prefix(run_id) + "parked"


def decisions_key(run_id: str) -> str:
    """The answers given to a parked run."""
    return _prefix(run_id) + "decisions"


def queue_keys(run_id: str) -> list[str]:
    """steer, follow_up, inflight steer, inflight follow_up, taken (the scripts' order)."""
    return [queue_key(run_id, "steer"), queue_key(run_id, "follow_up"),
            inflight_key(run_id, "steer"), inflight_key(run_id, "follow_up"), taken_key(run_id)]


def run_keys(run_id: str) -> list[str]:
    """All of a run's keys (expired together when it ends)."""
    found = [run_key(run_id), events_key(run_id), checkpoint_key(run_id), *queue_keys(run_id),
             parked_key(run_id), decisions_key(run_id)]
    return [*found, input_key(run_id)] if thread_of_run(run_id) else found


def input_key(run_id: str) -> str:
    """A thread run's prompts."""
    return _prefix(run_id) + "input"


def thread_run_keys(run_id: str) -> list[str]:
    """The keys a thread script touches of one run, in the scripts' order: run, events, ckpt,
    q steer, q follow_up, inflight steer, inflight follow_up, input."""
    return [run_key(run_id), events_key(run_id), checkpoint_key(run_id),
            queue_key(run_id, "steer"), queue_key(run_id, "follow_up"),
            inflight_key(run_id, "steer"), inflight_key(run_id, "follow_up"), input_key(run_id)]


def thread_key(thread_id: str, part: str) -> str:
    """One key of a thread: ``thread``, ``msgs``, ``runs`` or ``idem:<key>``."""
    return f"al:{{{thread_id}}}:{part}"


def thread_keys(thread_id: str) -> list[str]:
    """thread, msgs, runs (the thread scripts' first keys)."""
    return [thread_key(thread_id, "thread"), thread_key(thread_id, "msgs"),
            thread_key(thread_id, "runs")]


def tenant_threads_key(tenant: str) -> str:
    """The tenant's threads by creation time."""
    return f"al:tenant:{tenant}:threads"


def worker_key(worker: str) -> str:
    """The worker's liveness key (one per worker, however many runs it holds)."""
    return f"al:{{workers}}:{worker}"


def notes_channel(run_id: str) -> str:
    """The run's shard channel (Redis Cluster): its notes, in the slot of the run's keys (a
    thread's run: its thread's slot; a script may only publish to a channel of its slot)."""
    return _prefix(run_id) + "notes"


def tenant_runs_key(tenant: str) -> str:
    """The tenant's runs by creation time."""
    return f"al:tenant:{tenant}:runs"


def idempotency_key(tenant: str, key: str) -> str:
    """A tenant's Idempotency-Key."""
    return f"al:idem:{tenant}:{key}"


def counter_key(key: str) -> str:
    """A shared counter (``Counters.count_hit``), in a slot of its own."""
    return f"al:{{count:{key}}}"


def agents_key(tenant: str) -> str:
    """The tenant's agents: name → latest version (the tenant's agent keys share a slot)."""
    return f"al:{{agents:{tenant}}}:index"


def agent_versions_key(tenant: str, name: str) -> str:
    """One agent's versions, oldest first: ``<created_at>\\t<definition JSON>``."""
    return f"al:{{agents:{tenant}}}:agent:{name}"


def quota_active_key(tenant: str, subject: str | None) -> str:
    """The active runs of a tenant, or of one of its end users (the tenant's quota slot)."""
    return f"al:{{quota:{tenant}}}:active" + ("" if subject is None else f":s:{subject}")


def quota_rate_key(tenant: str, subject: str | None) -> str:
    """The runs admitted in the last minute (``runs_per_minute``)."""
    return f"al:{{quota:{tenant}}}:rate" + ("" if subject is None else f":s:{subject}")


def usage_key(tenant: str, day: str) -> str:
    """One UTC day's usage totals of a tenant (in its quota slot: ``tokens_per_day`` reads it
    in the admission script)."""
    return f"al:{{quota:{tenant}}}:usage:{day}"


def accrued_key(tenant: str, day: str) -> str:
    """The runs whose usage is counted in ``usage_key(tenant, day)``."""
    return f"al:{{quota:{tenant}}}:accrued:{day}"


def webhooks_key(run_id: str) -> str:
    """The run's webhook deliveries (in the run's slot, expiring with it)."""
    return _prefix(run_id) + "webhooks"
