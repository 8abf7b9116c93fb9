"""The thread contract on both backends: the atomic post and settle steps, deterministically
(runs are ended by hand here, no worker)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import orjson
import pytest

from app.engine.events import AgentEnd, RunCreated, encode_event_body, json_bytes, utc_now
from app.store import Backend
from app.store.errors import NotLastReply, QueueFull
from app.store.ids import new_thread_id, new_thread_run_id
from app.store.records import EventBatch, RunRecord
from app.store.thread_records import ThreadPost, ThreadRecord
from providers.messages import AssistantMessage, TextContent, Usage, UserMessage


async def new_thread(backend: Backend, tenant: str = "t") -> str:
    thread_id = new_thread_id()
    await backend.create_thread(ThreadRecord(id=thread_id, tenant=tenant,
                                                      created_at=time.time()))
    return thread_id


def make_post(thread_id: str, text: str, multitask: str = "enqueue",
              key: str | None = None) -> ThreadPost:
    run_id = new_thread_run_id(thread_id)
    record = RunRecord(id=run_id, tenant="t", model="fake:m", created_at=time.time(),
                       request={"model": "fake:m", "input": text})
    return ThreadPost(tenant="t", multitask=multitask, candidate=record,  # type: ignore[arg-type]
                      first_event=RunCreated(model="fake:m"),
                      prompts=[json_bytes(UserMessage(content=text))],
                      message_ids=[f"msg_{uuid.uuid4().hex}"], idempotency_key=key,
                      request_hash=text)


async def end_run(backend: Backend, run_id: str, *added: str, status: str = "completed"
                  ) -> None:
    """What a worker's last batch does: the checkpoint, ``agent_end`` and the final status."""
    record = await backend.get_run(run_id)
    assert record is not None
    checkpoint = []
    for text in added:
        message = UserMessage(content=text) if text.startswith("u:") else AssistantMessage(
            content=[TextContent(text=text)], provider="fake", model="m")
        checkpoint.append(json_bytes(message))
    end = AgentEnd(stop_reason="stop", error=None, usage=Usage(), messages=[])
    body = encode_event_body(end, run_id=run_id, ts=utc_now())
    await backend.append_events(run_id, None, EventBatch(
        events=[("agent_end", body)], checkpoint=checkpoint, fields={"status": status}))


def contents(messages: list[dict]) -> list[str]:
    out = []
    for m in messages:
        c = m["content"]
        out.append(c if isinstance(c, str) else "".join(b.get("text", "") for b in c))
    return out


async def test_post_to_an_idle_thread_starts_a_run(backend: Backend) -> None:
    thread_id = await new_thread(backend)
    store = backend
    post = make_post(thread_id, "u:one")
    outcome = await store.post_thread_run(thread_id, post)
    assert (outcome.action, outcome.run_id, outcome.queued) == ("started", post.candidate.id,
                                                               False)
    thread = await store.get_thread(thread_id)
    assert thread is not None and thread.active_run == outcome.run_id
    assert thread.status == "busy" and thread.runs == [outcome.run_id]
    history, prompts = await store.thread_run_inputs(outcome.run_id)
    assert history == [] and contents(prompts) == ["u:one"]
    events = await backend.read_events(outcome.run_id, 0)
    assert [e.type for e in events] == ["run_created"]
    claim = await backend.claim("w", 1.0)
    assert claim is not None and claim.run_id == outcome.run_id


async def test_a_follow_up_the_run_never_took_starts_the_next_run(backend: Backend) -> None:
    thread_id = await new_thread(backend)
    store = backend
    first = await store.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    queued = await store.post_thread_run(thread_id, make_post(thread_id, "u:two"))
    assert (queued.action, queued.run_id, queued.queued, queued.in_queue) == (
        "queued", first.run_id, True, True)
    log = await backend.read_events(first.run_id, 0)
    assert [e.type for e in log] == ["run_created", "message_queued"]
    assert orjson.loads(log[1].data)["message_id"] == queued.message_ids[0]
    await end_run(backend, first.run_id, "u:one", "reply one")  # ended without taking it
    started = await store.settle_thread(thread_id)
    assert started is not None and started != first.run_id
    assert await store.settle_thread(thread_id) is None  # idempotent
    thread = await store.get_thread(thread_id)
    assert thread is not None and thread.active_run == started
    assert thread.runs == [first.run_id, started]
    history, prompts = await store.thread_run_inputs(started)
    assert contents(history) == ["u:one", "reply one"] and contents(prompts) == ["u:two"]
    assert await backend.list_queue(first.run_id) == []
    run = await backend.get_run(started)
    assert run is not None and run.model == "fake:m" and run.status == "queued"


async def test_a_post_settles_an_ended_run_first(backend: Backend) -> None:
    thread_id = await new_thread(backend)
    store = backend
    first = await store.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    await end_run(backend, first.run_id, "u:one", "reply")
    second = await store.post_thread_run(thread_id, make_post(thread_id, "u:two", "reject"))
    assert second.action == "started"
    messages = await store.thread_messages(thread_id)
    assert contents(messages) == ["u:one", "reply", "u:two"]


async def test_a_cancelled_run_keeps_its_input_in_the_history(backend: Backend) -> None:
    thread_id = await new_thread(backend)
    store = backend
    first = await store.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    await end_run(backend, first.run_id, status="cancelled")  # before its first round
    await store.settle_thread(thread_id)
    assert contents(await store.thread_messages(thread_id)) == ["u:one"]
    thread = await store.get_thread(thread_id)
    assert thread is not None and thread.status == "idle"


async def test_policies_while_busy(backend: Backend) -> None:
    thread_id = await new_thread(backend)
    store = backend
    first = await store.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    rejected = await store.post_thread_run(thread_id, make_post(thread_id, "u:no", "reject"))
    assert (rejected.action, rejected.run_id) == ("rejected", first.run_id)
    steered = await store.post_thread_run(thread_id, make_post(thread_id, "u:steer", "steer"))
    assert (steered.action, steered.run_id, steered.in_queue) == ("steered", first.run_id, True)
    assert [k for k, _ in await backend.list_queue(first.run_id)] == ["steer"]
    post = make_post(thread_id, "u:now", "interrupt")
    interrupted = await store.post_thread_run(thread_id, post)
    assert (interrupted.action, interrupted.run_id, interrupted.queued) == (
        "interrupted", post.candidate.id, False)
    assert await backend.cancel_requested(first.run_id)
    later = await store.post_thread_run(thread_id, make_post(thread_id, "u:later"))
    assert (later.action, later.run_id, later.queued, later.in_queue) == (
        "queued", post.candidate.id, True, False)
    thread = await store.get_thread(thread_id)
    assert thread is not None and thread.next_run == post.candidate.id
    assert await backend.claim("w", 0.2) is not None  # the first run only
    assert await backend.claim("w", 0.2) is None  # the waiting run is not dispatched yet
    await end_run(backend, first.run_id, "u:one", status="cancelled")
    assert await store.settle_thread(thread_id) == post.candidate.id
    history, prompts = await store.thread_run_inputs(post.candidate.id)
    assert contents(history) == ["u:one"]
    assert contents(prompts) == ["u:steer", "u:now", "u:later"]  # never lost, in order
    claim = await backend.claim("w", 1.0)
    assert claim is not None and claim.run_id == post.candidate.id


def limited(post: ThreadPost, limit: int) -> ThreadPost:
    post.queue_limit = limit
    return post


async def test_a_queue_limit_holds_for_the_active_and_the_waiting_run(backend: Backend) -> None:
    thread_id = await new_thread(backend)
    first = await backend.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    for text, multitask in (("u:a", "enqueue"), ("u:b", "steer")):
        await backend.post_thread_run(thread_id, limited(make_post(thread_id, text, multitask), 2))
    for multitask in ("enqueue", "steer"):
        with pytest.raises(QueueFull) as refused:
            await backend.post_thread_run(thread_id,
                                          limited(make_post(thread_id, "u:x", multitask), 2))
        assert (refused.value.run_id, refused.value.limit) == (first.run_id, 2)
    assert [k for k, _ in await backend.list_queue(first.run_id)] == ["steer", "follow_up"]
    post = limited(make_post(thread_id, "u:now", "interrupt"), 2)
    await backend.post_thread_run(thread_id, post)  # the waiting run: its input holds u:now
    later = await backend.post_thread_run(thread_id, limited(make_post(thread_id, "u:later"), 2))
    assert later.run_id == post.candidate.id
    with pytest.raises(QueueFull) as refused:
        await backend.post_thread_run(thread_id, limited(make_post(thread_id, "u:x"), 2))
    assert refused.value.run_id == post.candidate.id
    await end_run(backend, first.run_id, "u:one", status="cancelled")
    assert await backend.settle_thread(thread_id) == post.candidate.id
    _, prompts = await backend.thread_run_inputs(post.candidate.id)
    # what the first run left carries over (past the limit: nothing posted is lost); u:x
    # is nowhere
    assert contents(prompts) == ["u:b", "u:a", "u:now", "u:later"]


async def test_idempotent_posts_and_tenants(backend: Backend) -> None:
    thread_id = await new_thread(backend)
    store = backend
    first = await store.post_thread_run(thread_id, make_post(thread_id, "u:a", key="k"))
    again = await store.post_thread_run(thread_id, make_post(thread_id, "u:a", key="k"))
    assert again.repeat and again.run_id == first.run_id and again.action == "started"
    try:
        await store.post_thread_run(thread_id, make_post(thread_id, "u:b", key="k"))
    except Exception as exc:
        assert type(exc).__name__ == "IdempotencyConflict"
    else:
        raise AssertionError("a different body under the same key must conflict")
    other = make_post(thread_id, "u:x")
    other.tenant = "someone-else"
    try:
        await store.post_thread_run(thread_id, other)
    except Exception as exc:
        assert type(exc).__name__ == "ThreadNotFound"
    else:
        raise AssertionError("another tenant's thread must not be found")


async def test_delete_cancels_and_listing(backend: Backend) -> None:
    store = backend
    ids = [await new_thread(backend) for _ in range(3)]
    page = await store.list_threads("t", status=None, metadata={}, limit=2, cursor=None)
    assert [t.id for t in page.threads] == ids[::-1][:2] and page.next_cursor
    first = await store.post_thread_run(ids[0], make_post(ids[0], "u:one"))
    busy = await store.list_threads("t", status="busy", metadata={}, limit=10, cursor=None)
    assert [t.id for t in busy.threads] == [ids[0]]
    await store.delete_thread(ids[0])
    assert await store.get_thread(ids[0]) is None
    assert await backend.cancel_requested(first.run_id)
    rest = await store.list_threads("t", status=None, metadata={}, limit=10, cursor=None)
    assert [t.id for t in rest.threads] == ids[:0:-1]


async def ttl_of(backend: Backend, thread_id: str) -> float | None:
    """Seconds until the thread expires (None: kept, as while busy)."""
    if backend.name == "memory":
        expires = backend._threads[thread_id].expires  # type: ignore[attr-defined]
        return None if expires is None else expires - time.time()
    from app.store.redis import keys as redis_keys

    ttl = await backend.client.pttl(redis_keys.thread_key(thread_id, "thread"))  # type: ignore[attr-defined]
    return None if ttl < 0 else ttl / 1000


async def test_the_thread_ttl_is_refreshed_on_activity(backend: Backend) -> None:
    store = backend
    store.thread_ttl = 500.0
    thread_id = await new_thread(backend)
    assert 400 < (await ttl_of(backend, thread_id) or 0) <= 500
    first = await store.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    assert await ttl_of(backend, thread_id) is None  # a busy thread never expires
    store.thread_ttl = 900.0
    await end_run(backend, first.run_id, "u:one", "reply")
    await store.settle_thread(thread_id)
    assert 800 < (await ttl_of(backend, thread_id) or 0) <= 900  # counted from its last run


def test_the_setting_reaches_the_backend() -> None:
    from app.store import make_backend

    assert make_backend(None, thread_ttl=123).thread_ttl == 123.0


async def test_every_thread_script_touches_one_cluster_slot(redis_url: str) -> None:
    """Each script call names only keys with its thread's hash tag (one Redis Cluster slot),
    the keys of the thread's runs included; so do the run scripts a worker runs on them. On
    one node (this backend) a script that may start or wake a run also ends its KEYS with the
    global dispatch keys, which a cluster's calls leave out."""
    import re

    from app.store import make_backend

    backend = make_backend(redis_url, lease=1.0, run_ttl=3600)
    await backend.start()
    calls: list[list[str]] = []
    pipeline = backend._pipeline  # type: ignore[attr-defined]
    original = pipeline.call

    async def recording(script: object, keys_: list[str], args: list[object]) -> object:
        calls.append(list(keys_))
        return await original(script, keys_, args)

    pipeline.call = recording
    try:
        thread_id = await new_thread(backend)
        store = backend
        first = await store.post_thread_run(thread_id, make_post(thread_id, "u:one"))
        await store.post_thread_run(thread_id, make_post(thread_id, "u:two"))
        claim = await backend.claim("w", 1.0)
        assert claim is not None
        await backend.take(first.run_id, "follow_up", "all", claim.attempt)
        await end_run(backend, first.run_id, "u:one", "reply")
        await store.settle_thread(thread_id)
        await store.post_thread_run(thread_id, make_post(thread_id, "u:three", "interrupt"))
        await store.delete_thread(thread_id)
    finally:
        await backend.close()
    assert len(calls) >= 7
    dispatch = {tuple(backend._dispatch("t")),  # type: ignore[attr-defined]
                tuple(backend._dispatch_keys())}  # type: ignore[attr-defined]
    for keys_ in calls:
        for tail in dispatch:
            if tuple(keys_[-len(tail):]) == tail:
                keys_ = keys_[:-len(tail)]
        tags = {re.search(r"\{([^}]*)\}", k)[1] for k in keys_}  # type: ignore[index]
        assert tags == {thread_id}, keys_


async def test_a_threads_workspace_stays_while_the_thread_does(backend: Backend,
                                                               tmp_path: Path) -> None:
    from app.worker.janitor import sweep

    alive, gone = await new_thread(backend), new_thread_id()
    for name in (alive, gone):
        (tmp_path / name).mkdir()
    assert await sweep(backend, tmp_path, grace=0) == [gone]
    await backend.delete_thread(alive)
    assert await sweep(backend, tmp_path, grace=0) == [alive]


async def test_racing_creators_of_one_thread_id_store_it_once(backend: Backend) -> None:
    """How a dialect's chat id becomes a thread on first use: of racing first requests one
    creates the thread, and none wipes what another posted to it since."""
    thread_id = new_thread_id()
    record = ThreadRecord(id=thread_id, tenant="t", created_at=time.time(),
                          metadata={"chat_id": "c"})
    store = backend
    created = await asyncio.gather(*(store.create_thread_if_absent(record) for _ in range(8)))
    assert sorted(created) == [False] * 7 + [True]
    outcome = await store.post_thread_run(thread_id, make_post(thread_id, "hello"))
    assert not await store.create_thread_if_absent(record)
    found = await store.get_thread(thread_id)
    assert found is not None and found.active_run == outcome.run_id
    assert found.metadata == {"chat_id": "c"} and found.runs == [outcome.run_id]
    listed = await store.list_threads("t", status=None, metadata={"chat_id": "c"}, limit=5,
                                      cursor=None)
    assert [t.id for t in listed.threads] == [thread_id]


async def test_a_post_replacing_the_last_reply_drops_it_from_the_history(
        backend: Backend) -> None:
    """Regenerate (``ThreadPost.replaces``): the last run's messages leave the history in the
    same step that starts the new run; the old run stays, marked ``replaced_by``."""
    thread_id = await new_thread(backend)
    first = await backend.post_thread_run(thread_id, make_post(thread_id, "u:one"))
    await end_run(backend, first.run_id, "u:one", "reply one")
    second = await backend.post_thread_run(thread_id, make_post(thread_id, "u:two"))
    await end_run(backend, second.run_id, "u:two", "reply two")
    busy = make_post(thread_id, "u:two", multitask="reject")
    busy.replaces = first.run_id  # not the last run
    try:
        await backend.post_thread_run(thread_id, busy)
        raise AssertionError("an older run was replaced")
    except NotLastReply:
        pass
    assert contents(await backend.thread_messages(thread_id)) == [
        "u:one", "reply one", "u:two", "reply two"]  # nothing changed
    again = make_post(thread_id, "u:two", multitask="reject")
    again.replaces = second.run_id
    outcome = await backend.post_thread_run(thread_id, again)
    assert outcome.action == "started"
    history, prompts = await backend.thread_run_inputs(outcome.run_id)
    assert contents(history) == ["u:one", "reply one"] and contents(prompts) == ["u:two"]
    old = await backend.get_run(second.run_id)
    assert old is not None and old.replaced_by == outcome.run_id and old.status == "completed"
    thread = await backend.get_thread(thread_id)
    assert thread is not None and thread.runs == [first.run_id, second.run_id, outcome.run_id]
    late = make_post(thread_id, "u:three", multitask="reject")
    late.replaces = outcome.run_id  # still running: the thread is busy
    assert (await backend.post_thread_run(thread_id, late)).action == "rejected"
    await end_run(backend, outcome.run_id, "u:two", "reply two again")
    assert contents(await backend.thread_messages(thread_id)) == [
        "u:one", "reply one", "u:two", "reply two again"]
