"""One end user cannot reach another's runs and threads in the same tenant, on any route: the
routes come from ``/openapi.json``, each must be in ``ROUTES`` (a new route fails this test
until it says what an end user gets there), and each is tried by subject B against subject A's
runs and threads. Nothing B tries changes what A has."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from tests.control.conftest import CLIENT_TOOL
from tests.support.errors import api_error
from tests.users.conftest import Users


@dataclass
class Seen:
    """A's things, by the names the route table uses."""

    run: str
    parked: str
    message: str
    thread: str
    chat: str = "chat-a"
    agui: str = "agui-a"


async def wait_status(client: httpx.AsyncClient, run_id: str, *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        run = (await client.get(f"/runs/{run_id}")).json()
        if run.get("status") in statuses:
            return run  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.02)


async def a_has(users: Users, a: httpx.AsyncClient) -> Seen:
    """A's run, parked run (with a queued follow-up), thread and two toolkit chats."""
    run = (await a.post("/runs", json={"agent": "support", "input": "say hi"})).json()
    parked = (await a.post("/runs", json={"agent": "support", "input": "park a1"})).json()
    await wait_status(a, parked["id"], "requires_action")
    message = (await a.post(f"/runs/{parked['id']}/follow_up", json={"content": "later"})
               ).json()["message_id"]
    thread = (await a.post("/threads", json={})).json()["id"]
    posted = await a.post(f"/threads/{thread}/runs", json={"agent": "support", "input": "hey"})
    assert posted.status_code == 201, posted.text
    chat = await a.post("/ai-sdk/chat", json={"id": "chat-a", "agent": "support", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}]})
    assert chat.status_code == 200, chat.text
    agui = await a.post("/ag-ui", json=ag_ui_input("agui-a"))
    assert agui.status_code == 200, agui.text
    await wait_status(a, run["id"], "completed")
    return Seen(run=run["id"], parked=parked["id"], message=message, thread=thread)


def ag_ui_input(thread: str) -> dict[str, Any]:
    return {"threadId": thread, "runId": "r1", "state": {}, "context": [], "tools": [],
            "messages": [{"id": "u1", "role": "user", "content": "hello"}],
            "forwardedProps": {"agent": "support"}}


PATH_VALUES = {"{run_id}": "run", "{thread_id}": "thread", "{message_id}": "message",
               "{chat_id}": "chat", "{name}": "support"}
ROUTES: dict[tuple[str, str], str] = {
    # A's things: B gets 404, as if they were another tenant's
    ("get", "/runs/{run_id}"): "404", ("post", "/runs/{run_id}/cancel"): "404",
    ("get", "/runs/{run_id}/events"): "404", ("post", "/runs/{run_id}/steer"): "404",
    ("post", "/runs/{run_id}/follow_up"): "404", ("get", "/runs/{run_id}/queue"): "404",
    ("delete", "/runs/{run_id}/queue/{message_id}"): "404",
    ("post", "/runs/{run_id}/approvals"): "404", ("post", "/runs/{run_id}/tool_results"): "404",
    ("get", "/threads/{thread_id}"): "404", ("delete", "/threads/{thread_id}"): "404",
    ("post", "/threads/{thread_id}/runs"): "404", ("get", "/threads/{thread_id}/events"): "404",
    ("get", "/runs/{run_id}/webhooks"): "404",
    # a toolkit's chat id names the caller's own chat: B's "chat-a" is not A's
    ("get", "/ai-sdk/chat/{chat_id}/stream"): "own", ("get", "/ag-ui/threads/{thread_id}/stream"):
        "own", ("get", "/ai-sdk/chat/{chat_id}/messages"): "own",
    ("post", "/ai-sdk/chat"): "own", ("post", "/ag-ui"): "own",
    # lists: B's own only; creating: B's own
    ("get", "/runs"): "list", ("get", "/threads"): "list", ("post", "/runs"): "own",
    ("post", "/threads"): "own",
    # the tenant's: not for an end user
    ("post", "/agents"): "403", ("get", "/agents"): "403", ("get", "/agents/{name}"): "403",
    ("put", "/agents/{name}"): "403", ("delete", "/agents/{name}"): "403",
    ("get", "/agents/{name}/versions"): "403", ("post", "/client_tokens"): "403",
    ("get", "/usage"): "403",
    # nothing of anyone's
    ("get", "/tools"): "open", ("get", "/healthz"): "open", ("get", "/readyz"): "open",
    ("get", "/metrics"): "open",
}
BODIES: dict[str, dict[str, Any]] = {
    "/runs/{run_id}/steer": {"content": "hi"}, "/runs/{run_id}/follow_up": {"content": "hi"},
    "/runs/{run_id}/approvals": {"tool_call_id": "guard-a1", "decision": "approve"},
    "/runs/{run_id}/tool_results": {"tool_call_id": "guard-a1", "content": "x"},
    "/threads/{thread_id}/runs": {"agent": "support", "input": "hi"},
    "/runs": {"agent": "support", "input": "say b"}, "/threads": {},
    "/agents": {"name": "mine", "toolset": "none"}, "/agents/{name}": {"name": "support"},
    "/client_tokens": {"subject": "b"},
    "/ai-sdk/chat": {"id": "chat-a", "agent": "support", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]},
    "/ag-ui": ag_ui_input("agui-a"),
}


def concrete(path: str, seen: Seen) -> list[str]:
    """The URLs B tries for ``path``: every run of A's where a run goes."""
    urls = [path]
    for slot, name in PATH_VALUES.items():
        if slot not in path:
            continue
        if slot == "{run_id}":
            urls = [u.replace(slot, r) for u in urls for r in (seen.run, seen.parked)]
        elif slot == "{thread_id}" and path.startswith("/ag-ui"):
            urls = [u.replace(slot, seen.agui) for u in urls]
        else:
            value = getattr(seen, name, name)
            urls = [u.replace(slot, value) for u in urls]
    if "{message_id}" in path:
        urls = [u for u in urls if seen.parked in u]
    return urls


async def test_every_route_keeps_one_end_user_out_of_anothers(users: Users) -> None:
    doc = (await users.admin.get("/openapi.json")).json()
    routes = {(m, p) for p, item in doc["paths"].items() for m in item}
    assert routes - ROUTES.keys() == set(), "say what an end user gets on these routes"
    assert ROUTES.keys() - routes == set()
    async with users.client(await users.token("a")) as a, \
            users.client(await users.token("b")) as b:
        seen = await a_has(users, a)
        before = await snapshot(a, seen)
        failures = []
        for (method, path), rule in sorted(ROUTES.items()):
            for url in concrete(path, seen):
                try:
                    await check(b, method, url, rule, BODIES.get(path), seen)
                except AssertionError as exc:
                    failures.append(f"{method.upper()} {url}: {exc}")
        assert failures == []
        # the stream query parameter takes B's token, and keeps it to B's things too
        token = b.headers["Authorization"].removeprefix("Bearer ")
        own = a.headers["Authorization"].removeprefix("Bearer ")
        async with httpx.AsyncClient(base_url=users.url) as anyone:
            for url in (f"/runs/{seen.run}/events", f"/threads/{seen.thread}/events"):
                assert (await anyone.get(url, params={"token": token})).status_code == 404
            # A's own token opens A's stream, as an EventSource would send it
            async with anyone.stream("GET", f"/runs/{seen.run}/events",
                                     params={"token": own}) as stream:
                assert stream.status_code == 200
                body = b"".join([chunk async for chunk in stream.aiter_bytes()])
            assert b"event: agent_end" in body
        assert await snapshot(a, seen) == before  # nothing of A's changed
        # A still reaches all of it; the tenant's key too; the other tenant's key nothing
        for client, expected in ((a, 200), (users.admin, 200)):
            assert (await client.get(f"/runs/{seen.parked}")).status_code == expected
            assert (await client.get(f"/threads/{seen.thread}")).status_code == expected
        async with users.client("key-u") as other:
            assert (await other.get(f"/runs/{seen.parked}")).status_code == 404


async def snapshot(a: httpx.AsyncClient, seen: Seen) -> dict[str, Any]:
    """What B must not change: A's runs' states, waits, queue and thread."""
    parked = (await a.get(f"/runs/{seen.parked}")).json()
    thread = (await a.get(f"/threads/{seen.thread}")).json()
    queue = (await a.get(f"/runs/{seen.parked}/queue")).json()
    return {"run": (await a.get(f"/runs/{seen.run}")).json()["status"],
            "parked": (parked["status"], parked["pending"]), "queue": queue,
            "thread": (thread["status"], len(thread["runs"]))}


async def check(b: httpx.AsyncClient, method: str, url: str, rule: str,
                body: dict[str, Any] | None, seen: Seen) -> None:
    kwargs: dict[str, Any] = {"json": body} if method in ("post", "put") else {}
    resp = await b.request(method.upper(), url, **kwargs)
    if rule == "404":
        assert resp.status_code == 404, f"{resp.status_code} {resp.text[:200]}"
    elif rule == "403":
        assert resp.status_code == 403, f"{resp.status_code} {resp.text[:200]}"
    elif rule == "open":
        assert resp.status_code == 200, resp.status_code
    elif rule == "list":
        assert resp.status_code == 200, resp.text[:200]
        items = resp.json().get("runs", resp.json().get("threads"))
        mine = {seen.run, seen.parked, seen.thread}
        assert not mine & {item["id"] for item in items}, "A's things are listed"
    elif rule == "own":
        assert resp.status_code in (200, 201, 204), f"{resp.status_code} {resp.text[:200]}"
        if method == "post" and url in ("/runs", "/threads"):
            assert resp.json()["id"] not in {seen.run, seen.parked, seen.thread}
        if url.endswith("/messages"):  # B's chat of that id has nothing (A's has)
            assert resp.json() == [], resp.text[:200]
    else:
        raise AssertionError(f"unknown rule {rule}")


async def test_an_idempotency_key_is_each_end_users_own(users: Users) -> None:
    """The same ``Idempotency-Key`` and body from two end users of one tenant are two runs:
    B's request once replayed A's run (its answer, a stream token for it) with 200, and a
    different body told B, by 409, that A had used the key. Each still replays its own."""
    body = {"agent": "support", "input": "say hi"}
    key = {"Idempotency-Key": "send-1"}
    async with users.client(await users.token("idem-a")) as a, \
            users.client(await users.token("idem-b")) as b:
        first = await a.post("/runs", json=body, headers=key)
        assert first.status_code == 201, first.text
        theirs = await b.post("/runs", json=body, headers=key)
        assert theirs.status_code == 201, theirs.text
        assert theirs.json()["id"] != first.json()["id"]
        other = await b.post("/runs", json={**body, "input": "else"},
                             headers={"Idempotency-Key": "send-2"})
        assert other.status_code == 201, other.text
        assert (await a.post("/runs", json={**body, "input": "mine"},
                             headers={"Idempotency-Key": "send-2"})).status_code == 201
        for client, run in ((a, first), (b, theirs)):  # each one's repeat is its own run
            again = await client.post("/runs", json=body, headers=key)
            assert (again.status_code, again.json()["id"]) == (200, run.json()["id"])
            changed = await client.post("/runs", json={**body, "input": "x"}, headers=key)
            assert changed.status_code == 409, changed.text
        # the tenant's key keeps its own keys, apart from its end users'
        tenant = await users.admin.post("/runs", json=body, headers=key)
        assert tenant.status_code == 201, tenant.text
        assert tenant.json()["id"] not in (first.json()["id"], theirs.json()["id"])
        again = await users.admin.post("/runs", json=body, headers=key)
        assert (again.status_code, again.json()["id"]) == (200, tenant.json()["id"])


async def test_a_token_for_some_threads_only_reaches_them(users: Users) -> None:
    async with users.client(await users.token("c")) as c:
        mine = (await c.post("/threads", json={})).json()["id"]
        other = (await c.post("/threads", json={})).json()["id"]
    async with users.client(await users.token("c", threads=[mine])) as scoped:
        assert (await scoped.post(f"/threads/{mine}/runs", json={
            "agent": "support", "input": "hi"})).status_code == 201
        assert (await scoped.get(f"/threads/{other}")).status_code == 404
        for refused in (await scoped.post("/runs", json={"agent": "support", "input": "x"}),
                        await scoped.post("/threads", json={})):
            assert refused.status_code == 403, refused.text
        listed = (await scoped.get("/threads")).json()["threads"]
        assert [t["id"] for t in listed] == [mine]


async def test_client_tool_declared_by_an_end_user_must_be_the_agents(users: Users) -> None:
    async with users.client(await users.token("d", agents=["open"])) as d:
        ok = await d.post("/runs", json={"input": "client d1", "client_tools": [CLIENT_TOOL]})
        assert ok.status_code == 201, ok.text
        stray = {**CLIENT_TOOL, "name": "format_disk"}
        resp = await d.post("/runs", json={"input": "x", "client_tools": [CLIENT_TOOL, stray]})
        assert resp.status_code == 403 and api_error(resp)["field"] == "client_tools[1]"
        run = await wait_status(d, ok.json()["id"], "requires_action")
        assert run["pending"][0]["tool_name"] == CLIENT_TOOL["name"]
    async with users.client(await users.token("d", agents=["support"])) as d:
        resp = await d.post("/runs", json={"input": "x", "client_tools": [CLIENT_TOOL]})
        assert resp.status_code == 403 and api_error(resp)["field"] == "client_tools[0]"
