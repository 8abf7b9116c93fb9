"""A process that dies right after a store step that starts or wakes a run leaves that run
dispatched. On one Redis node the step's script adds the run's job itself; on a Redis Cluster,
where the job lives in another slot, the run was marked before the step and the stranded-run
sweep (``redispatch_stranded``) dispatches it. Each path that sets a run ``queued`` is cut
right after its script (nothing the process would have done next happens), then another
backend instance, as another process would, sweeps and claims the run."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from app.engine.events import ApprovalDecided
from app.store import make_backend
from app.store.ids import new_thread_id
from app.store.records import Answer, RunRecord
from app.store.redis import dispatch, keys
from app.store.redis.backend import RedisBackend
from app.store.thread_records import ThreadRecord
from tests.backends.helpers import msg
from tests.backends.test_threads import end_run, make_post, new_thread

CALLS = [{"tool_call_id": "c1", "tool_name": "t", "args": {}, "kind": "approval", "index": 0}]


class Died(BaseException):
    """The process is gone: nothing after the script runs (no handler catches this)."""


@pytest.fixture(params=["redis", "cluster"])
async def two(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
              ) -> AsyncIterator[tuple[RedisBackend, RedisBackend]]:
    """The process that dies and the one that lives on (its sweep takes any mark as old)."""
    cluster = request.param == "cluster"
    url = request.getfixturevalue("cluster_url" if cluster else "redis_url")
    made = [make_backend(url, lease=1.0, run_ttl=3600, **({"cluster": True} if cluster else {}))
            for _ in range(2)]
    for b in made:
        await b.start()
    monkeypatch.setattr(dispatch, "STRANDED_AFTER_S", 0.0)
    try:
        yield made[0], made[1]  # type: ignore[return-value]
    finally:
        for b in made:
            await b.close()


def on_cluster(backend: RedisBackend) -> bool:
    return backend._nodes is not None


async def dies_after(backend: RedisBackend, script: str, step: Awaitable[Any]) -> None:
    """Run ``step``; the process dies as the script ``script`` returns."""
    pipeline: Any = backend._pipeline
    original = pipeline.call
    target = backend._s[script]

    async def call(s: object, keys_: list[str], args: list[object]) -> object:
        reply = await original(s, keys_, args)
        if s is target:
            raise Died(script)
        return reply

    pipeline.call = call
    try:
        with pytest.raises(Died):
            await step
    finally:
        pipeline.call = original


async def listed(backend: RedisBackend) -> list[str]:
    """The tenant's runs as ``GET /runs`` lists them."""
    page = await backend.list_runs("t", status=None, metadata={}, limit=100, cursor=None)
    return [r.id for r in page.runs]


async def claimed_by_the_other(other: RedisBackend, run_id: str) -> None:
    """One node: the job is there. A cluster: no worker finds the run until the sweep
    dispatches it, once; then it is claimed."""
    if on_cluster(other):
        assert await other.claim("survivor", timeout=0.3) is None
        assert await other.redispatch_stranded() == [run_id]
    else:
        assert await other.redispatch_stranded() == []
    claim = await other.claim("survivor", timeout=5.0)
    assert claim is not None and claim.run_id == run_id, claim
    assert await other.redispatch_stranded() == []
    assert await marks(other) == 0


async def marks(backend: RedisBackend) -> int:
    return int(await backend.client.zcard(keys.DISPATCH_MARKS))


async def parked(backend: RedisBackend) -> str:
    record = RunRecord(id=f"run_d{time.time_ns()}", tenant="t", created_at=time.time())
    await backend.create_run(record)
    claim = await backend.claim("w", 5.0)
    assert claim is not None
    assert await backend.park(claim.run_id, claim.attempt, CALLS, time.time() + 0.5)
    return claim.run_id


async def parked_thread(backend: RedisBackend) -> tuple[str, str]:
    thread_id = await new_thread(backend)
    first = await backend.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    claim = await backend.claim("w", 5.0)
    assert claim is not None and claim.run_id == first.run_id
    assert await backend.park(claim.run_id, claim.attempt, CALLS, None)
    return thread_id, first.run_id


WAKES: dict[str, tuple[str, Callable[[RedisBackend, str], Awaitable[Any]]]] = {
    "steer": ("ENQUEUE", lambda b, r: b.enqueue(r, "steer", msg("s1"))),
    "cancel": ("CANCEL", lambda b, r: b.request_cancel(r)),
    "answer": ("DECIDE", lambda b, r: b.decide(r, [Answer(
        "c1", {"kind": "approve"}, ApprovalDecided(tool_call_id="c1", decision="approve"))])),
    "wake": ("WAKE", lambda b, r: b.wake(r)),
    "approval timeout": ("WAKE", lambda b, r: b.expire_due(time.time() + 1)),
}


@pytest.mark.parametrize("path", list(WAKES))
async def test_a_woken_run_is_dispatched_in_the_waking_step(
        two: tuple[RedisBackend, RedisBackend], path: str) -> None:
    dying, other = two
    run_id = await parked(dying)
    script, step = WAKES[path]
    await dies_after(dying, script, step(dying, run_id))
    assert (await other.get_run(run_id)).status == "queued"  # type: ignore[union-attr]
    await claimed_by_the_other(other, run_id)
    assert not await other.expire_due(time.time() + 1)  # it left the deadline index too


async def test_a_thread_post_that_starts_a_run_dispatches_and_lists_it(
        two: tuple[RedisBackend, RedisBackend]) -> None:
    dying, other = two
    thread_id = await new_thread(dying)
    post = make_post(thread_id, "u:one")
    await dies_after(dying, "POST", dying.post_thread_run(thread_id, post))
    await claimed_by_the_other(other, post.candidate.id)
    assert post.candidate.id in await listed(other)


async def test_a_toolkits_first_message_lists_the_thread_it_creates(
        two: tuple[RedisBackend, RedisBackend]) -> None:
    """The post that creates a chat's thread puts it in ``GET /threads``: on one node in the
    same step, on a cluster (which writes the index after) by the sweep of its run."""
    dying, other = two
    thread_id = new_thread_id()
    post = make_post(thread_id, "u:one")
    post.create = ThreadRecord(id=thread_id, tenant="t", created_at=time.time())
    await dies_after(dying, "POST", dying.post_thread_run(thread_id, post))
    await claimed_by_the_other(other, post.candidate.id)
    page = await other.list_threads("t", status=None, metadata={}, limit=100, cursor=None)
    assert thread_id in [t.id for t in page.threads]


@pytest.mark.parametrize("multitask", ["steer", "interrupt"])
async def test_a_thread_post_that_wakes_its_parked_run_dispatches_it(
        two: tuple[RedisBackend, RedisBackend], multitask: str) -> None:
    dying, other = two
    thread_id, run_id = await parked_thread(dying)
    post = make_post(thread_id, "u:now", multitask)
    await dies_after(dying, "POST", dying.post_thread_run(thread_id, post))
    await claimed_by_the_other(other, run_id)
    if multitask == "interrupt":  # the run that follows waits its turn
        if not on_cluster(other):  # listed at once (a cluster's: once it starts)
            assert post.candidate.id in await listed(other)
        if on_cluster(other):  # even a mark of it left behind: the sweep leaves it waiting
            await dying._mark(post.candidate.id)
            assert await other.redispatch_stranded() == []
            assert await marks(other) == 0
        assert await other.claim("survivor", timeout=0.2) is None


async def test_deleting_a_thread_dispatches_its_parked_run_to_end(
        two: tuple[RedisBackend, RedisBackend]) -> None:
    dying, other = two
    thread_id, run_id = await parked_thread(dying)
    await dies_after(dying, "DELETE", dying.delete_thread(thread_id))
    await claimed_by_the_other(other, run_id)


@pytest.mark.parametrize("waiting", ["interrupt", "left follow-up"])
async def test_settling_a_thread_dispatches_the_run_that_follows(
        two: tuple[RedisBackend, RedisBackend], waiting: str) -> None:
    dying, other = two
    thread_id = await new_thread(dying)
    first = await dying.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    claim = await dying.claim("w", 5.0)
    assert claim is not None and claim.run_id == first.run_id
    if waiting == "interrupt":
        post = make_post(thread_id, "u:now", "interrupt")
        await dying.post_thread_run(thread_id, post)
        follows: str | None = post.candidate.id
    else:  # a follow-up the run never took: a run of its own follows
        await dying.post_thread_run(thread_id, make_post(thread_id, "u:later"))
        follows = None
    await end_run(dying, first.run_id, "u:one", status="cancelled")
    await dies_after(dying, "SETTLE", dying.settle_thread(thread_id))
    thread = await other.get_thread(thread_id)
    assert thread is not None and thread.active_run is not None
    assert follows is None or thread.active_run == follows
    await claimed_by_the_other(other, thread.active_run)
    assert thread.active_run in await listed(other)


async def test_a_new_run_whose_job_was_never_written_is_swept(
        two: tuple[RedisBackend, RedisBackend]) -> None:
    dying, other = two
    if not on_cluster(dying):
        pytest.skip("one node: a run and its job go out in one round trip")
    record = RunRecord(id=f"run_n{time.time_ns()}", tenant="t", created_at=time.time())

    async def died(*_: object, **__: object) -> None:
        raise Died("after the run's record, before its job")

    dying._woken = died  # type: ignore[method-assign]
    with pytest.raises(Died):
        await dying.create_run(record)
    await claimed_by_the_other(other, record.id)


async def test_steps_that_live_leave_no_mark_and_the_sweep_leaves_live_runs_alone(
        two: tuple[RedisBackend, RedisBackend]) -> None:
    dying, other = two
    run_id = await parked(dying)
    await dying.enqueue(run_id, "steer", msg("s1"))  # wakes it: dispatched, nothing marked
    await dying.create_run(RunRecord(id=f"run_q{time.time_ns()}", tenant="t",
                                     created_at=time.time()))
    thread_id = await new_thread(dying)
    await dying.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    assert await marks(dying) == 0
    assert await other.redispatch_stranded() == []
    claimed = {c.run_id for c in await other.claim_many("survivor", 5.0, 10)}
    while len(claimed) < 3:
        more = await other.claim_many("survivor", 1.0, 10)
        assert more, claimed
        claimed |= {c.run_id for c in more}
    assert len(claimed) == 3 and run_id in claimed


async def test_a_workers_sweep_loop_dispatches_it(two: tuple[RedisBackend, RedisBackend]
                                                  ) -> None:
    """What every worker runs (``app.worker.stranded``), on the stranded run of a thread."""
    import asyncio

    from app.worker.stranded import redispatch_stranded

    dying, other = two
    thread_id = await new_thread(dying)
    post = make_post(thread_id, "u:one")
    await dies_after(dying, "POST", dying.post_thread_run(thread_id, post))
    from prometheus_client import REGISTRY

    def swept() -> float:
        return REGISTRY.get_sample_value("agentloop_stranded_runs_total") or 0.0

    before = swept()
    stop = asyncio.Event()
    sweeping = asyncio.create_task(redispatch_stranded(other, stop, every=0.05))
    try:
        claim = await other.claim("survivor", timeout=10.0)
    finally:
        stop.set()
        await sweeping
    assert claim is not None and claim.run_id == post.candidate.id
    assert swept() - before == (1 if on_cluster(other) else 0)  # operators see it happen
