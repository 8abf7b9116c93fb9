"""``multitask`` over a real socket on both backends: what a message posted to a busy thread
does. The first run is held in its model call by the provider's gate until the test opens it."""

from __future__ import annotations

import threading

from tests.threads.conftest import ThreadApi
from tests.threads.test_threads import texts


async def busy_thread(tapi: ThreadApi) -> tuple[str, dict]:
    tapi.provider.gate = threading.Event()
    thread_id = await tapi.new_thread()
    first = (await tapi.post(thread_id, "one", expect=201)).json()
    await tapi.wait_run(first["id"], "running")
    return thread_id, first


async def test_reject_answers_409_naming_the_active_run(tapi: ThreadApi) -> None:
    thread_id, first = await busy_thread(tapi)
    resp = await tapi.post(thread_id, "two", multitask="reject")
    assert resp.status_code == 409, resp.text
    error = resp.json()["error"]
    assert error["code"] == "thread_busy" and first["id"] in error["message"]
    assert resp.headers["location"] == f"/runs/{first['id']}"
    assert tapi.provider.gate is not None
    tapi.provider.gate.set()
    thread = await tapi.wait_idle(thread_id)
    assert texts(thread["messages"]) == [("user", "one"), ("assistant", "echo: one")]


async def test_enqueue_is_a_follow_up_of_the_active_run(tapi: ThreadApi) -> None:
    thread_id, first = await busy_thread(tapi)
    resp = await tapi.post(thread_id, "two")  # enqueue is the default
    assert resp.status_code == 202, resp.text
    run = resp.json()
    assert run["id"] == first["id"] and run["multitask"]["action"] == "queued"
    assert run["multitask"]["queued"] is True and run["queue"]["follow_up"] == 1
    assert tapi.provider.gate is not None
    tapi.provider.gate.set()
    thread = await tapi.wait_idle(thread_id)
    assert texts(thread["messages"]) == [("user", "one"), ("assistant", "echo: one"),
                                         ("user", "two"), ("assistant", "echo: two")]
    assert thread["runs"] == [first["id"]]


async def test_steer_joins_the_active_run_as_steering(tapi: ThreadApi) -> None:
    thread_id, first = await busy_thread(tapi)
    resp = await tapi.post(thread_id, "turn left", multitask="steer")
    assert resp.status_code == 202, resp.text
    assert resp.json()["multitask"]["action"] == "steered"
    assert resp.json()["queue"]["steer"] == 1
    assert tapi.provider.gate is not None
    tapi.provider.gate.set()
    thread = await tapi.wait_idle(thread_id)
    assert [m for m in texts(thread["messages"]) if m[0] == "user"] == [
        ("user", "one"), ("user", "turn left")]
    assert thread["runs"] == [first["id"]]


async def test_interrupt_cancels_and_continues_from_the_history(tapi: ThreadApi) -> None:
    thread_id, first = await busy_thread(tapi)
    resp = await tapi.post(thread_id, "stop, do this", multitask="interrupt")
    assert resp.status_code == 201, resp.text
    second = resp.json()
    assert second["id"] != first["id"] and second["multitask"]["action"] == "interrupted"
    assert second["status"] == "queued"
    assert texts(second["messages"]) == [("user", "stop, do this")]
    ended = await tapi.wait_run(first["id"], "cancelled")
    assert ended["stop_reason"] == "aborted"
    assert tapi.provider.gate is not None
    await tapi.wait_run(second["id"], "running")
    tapi.provider.gate.set()
    await tapi.wait_run(second["id"], "completed")
    thread = await tapi.wait_idle(thread_id)
    assert [m for m in texts(thread["messages"]) if m[0] == "user"] == [
        ("user", "one"), ("user", "stop, do this")]
    assert texts(thread["messages"])[-1] == ("assistant", "echo: stop, do this")
    assert thread["runs"] == [first["id"], second["id"]]
    sent = tapi.provider.requests[-1].messages  # the cancelled reply is repaired away
    assert [type(m).__name__ for m in sent] == ["UserMessage", "UserMessage"]
