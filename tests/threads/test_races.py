"""Races over real HTTP on both backends: two clients post to one thread at the same instant,
200 trials per policy. Half the trials race on an idle thread, half on a busy one (a run of
the thread still going, or ending just then: the provider answers after a random pause).

After each trial, once the thread is idle: every accepted message is in the history exactly
once and a rejected one not at all; the history is exactly the runs' messages one run after
the other (every message in exactly one run, nothing outside them); runs never overlap (each
starts after the one before it ended: never two active runs).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import httpx
import pytest

from tests.support.live_server import client_limits
from tests.threads.conftest import ThreadApi

TRIALS = 200
CONCURRENT = 16


async def _post(client: httpx.AsyncClient, thread_id: str, text: str, policy: str
                ) -> httpx.Response:
    return await client.post(f"/threads/{thread_id}/runs",
                             json={"input": text, "multitask": policy})


async def _check(tapi: ThreadApi, thread_id: str, accepted: list[str], rejected: list[str]
                 ) -> None:
    thread = await tapi.wait_idle(thread_id)
    users = [m["content"] for m in thread["messages"] if m["role"] == "user"]
    assert Counter(users) == Counter(accepted), (thread_id, users, accepted)
    assert not set(rejected) & set(users)
    runs = [await tapi.run(run_id) for run_id in thread["runs"]]
    assert all(r["status"] in ("completed", "cancelled") for r in runs), runs
    assert [m for r in runs for m in r["messages"]] == thread["messages"]
    for before, after in itertools.pairwise(runs):
        if after["started_at"] is not None:
            assert after["started_at"] >= before["ended_at"], (before, after)


async def _trial(tapi: ThreadApi, clients: list[httpx.AsyncClient], policy: str, n: int,
                 seen: Counter[str]) -> None:
    thread_id = await tapi.new_thread()
    accepted: list[str] = []
    if n % 2:  # a busy thread (or one whose run is ending right now)
        await tapi.post(thread_id, f"t{n}-0", expect=201)
        accepted.append(f"t{n}-0")
    texts = [f"t{n}-a", f"t{n}-b"]
    answers = await asyncio.gather(*(_post(c, thread_id, t, policy)
                                     for c, t in zip(clients, texts, strict=True)))
    rejected = []
    for text, resp in zip(texts, answers, strict=True):
        if resp.status_code == 409:
            assert resp.json()["error"]["code"] == "thread_busy" and policy == "reject"
            rejected.append(text)
            seen["rejected"] += 1
        else:
            assert resp.status_code in (201, 202), resp.text
            accepted.append(text)
            seen[resp.json()["multitask"]["action"]] += 1
    if n % 2 == 0:  # on an idle thread exactly one of the two starts a run... unless the
        # first one's run was over before the second post arrived: then both started one
        assert [r.json()["multitask"]["action"] for r in answers
                if r.status_code < 300].count("started") >= 1
    await _check(tapi, thread_id, accepted, rejected)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("policy", ["reject", "enqueue", "steer", "interrupt"])
async def test_two_clients_post_to_one_thread_at_once(tapi: ThreadApi, policy: str) -> None:
    tapi.provider.jitter = 0.02
    seen: Counter[str] = Counter()
    gate = asyncio.Semaphore(CONCURRENT)
    limits = client_limits()  # no client-side expiry: see client_limits
    async with httpx.AsyncClient(base_url=tapi.url, timeout=30, limits=limits) as a, \
            httpx.AsyncClient(base_url=tapi.url, timeout=30, limits=limits) as b:

        async def one(n: int) -> None:
            async with gate:
                await _trial(tapi, [a, b], policy, n, seen)

        await asyncio.gather(*(one(n) for n in range(TRIALS)))
    busy = {"reject": "rejected", "enqueue": "queued", "steer": "steered",
            "interrupt": "interrupted"}[policy]
    assert seen[busy] >= TRIALS // 10, seen  # the race did hit busy threads, often
