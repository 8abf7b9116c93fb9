"""API keys, tenant isolation and stream tokens."""

from __future__ import annotations

import base64
import time

import httpx
import orjson

from app.api.auth import Authenticator
from tests.api.conftest import serve
from tests.support.sse_client import read_all

KEYS = "key-a:alpha,key-b:beta"


async def test_keys_tenants_and_stream_tokens() -> None:
    async with serve(api_key="key-a", api_keys=KEYS, worker=False) as api:
        anon = httpx.AsyncClient(base_url=api.url)
        beta = httpx.AsyncClient(base_url=api.url, headers={"Authorization": "Bearer key-b"})
        async with anon, beta:
            assert (await anon.get("/healthz")).status_code == 200
            assert (await anon.get("/readyz")).status_code == 200
            assert (await anon.get("/metrics")).status_code == 200
            resp = await anon.post("/runs", json={"input": "x"})
            assert resp.status_code == 401
            assert resp.json()["error"]["code"] == "unauthorized"
            bad = await anon.get("/runs", headers={"Authorization": "Bearer nope"})
            assert bad.status_code == 401
            assert (await anon.get("/tools")).status_code == 401

            run = await api.create(input="mine")
            token = run["stream_token"]
            assert (await beta.get(f"/runs/{run['id']}")).status_code == 404
            assert (await beta.post(f"/runs/{run['id']}/cancel")).status_code == 404
            assert (await beta.get("/runs")).json()["runs"] == []
            assert len((await api.client.get("/runs")).json()["runs"]) == 1

            # a token opens only its run's events, and only there
            other = await api.create(input="other")
            await api.call(_end_run(api.backend, run["id"]))
            frames = await read_all(anon, f"/runs/{run['id']}/events", params={"token": token})
            assert [f.event for f in frames] == ["run_created", "agent_end"]
            resp = await anon.get(f"/runs/{other['id']}/events", params={"token": token})
            assert resp.status_code == 401
            assert (await anon.get(f"/runs/{run['id']}", params={"token": token})).status_code \
                == 401
            resp = await anon.post(f"/runs/{run['id']}/cancel", params={"token": token})
            assert resp.status_code == 401


async def _end_run(backend, run_id: str) -> None:
    from app.engine.events import AgentEnd, encode_event_body, utc_now
    from app.store.records import EventBatch
    from providers.messages import Usage

    body = encode_event_body(AgentEnd(stop_reason="stop", error=None, usage=Usage(),
                                      messages=[]), run_id=run_id, ts=utc_now())
    await backend.append_events(run_id, None, EventBatch(events=[("agent_end", body)]))


def test_expired_or_forged_tokens_are_rejected() -> None:
    auth = Authenticator({"k": "t"}, secret=None, token_ttl=60)
    good = auth.issue_token("run_1", "t")
    assert auth.verify_token(good, "run_1") is not None
    assert auth.verify_token(good, "run_2") is None
    assert auth.verify_token(auth.issue_token("run_1", "t", now=1000.0), "run_1") is None
    payload, _, sig = good.partition(".")
    assert auth.verify_token(payload + "x." + sig, "run_1") is None
    other = Authenticator({"k2": "t"}, secret=None, token_ttl=60)
    assert other.verify_token(good, "run_1") is None
    replica = Authenticator({"k": "t"}, secret=None, token_ttl=60)
    assert replica.verify_token(good, "run_1") is not None
    assert auth.tenant_for_key("k") == "t" and auth.tenant_for_key("kk") is None


def _expiry(token: str) -> int:
    payload = token.partition(".")[0]
    return int(orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["e"])


async def test_every_run_read_returns_a_fresh_token_that_renews_an_expired_one() -> None:
    """An EventSource whose token expired gets 401 on its next reconnect; the page renews it
    with the API key (GET /runs/{id}) and resumes with ?after= — a reload or a second tab too."""
    async with serve(api_key="key-a", api_keys=KEYS, worker=False, stream_token_ttl=900) as api, \
            httpx.AsyncClient(base_url=api.url) as anon:
        run = await api.create()
        other = await api.create()
        await api.call(_end_run(api.backend, run["id"]))
        url = run["events_url"]
        expired = Authenticator({"key-a": "alpha", "key-b": "beta"}, secret=None,
                                token_ttl=900).issue_token(run["id"], "alpha",
                                                           now=time.time() - 1000)
        resp = await anon.get(url, params={"token": expired, "after": "1"})
        assert resp.status_code == 401 and "GET /runs/{id}" in resp.json()["error"]["message"]

        fresh = (await api.get(run["id"]))["stream_token"]
        assert _expiry(fresh) >= time.time() + 900 - 5
        frames = await read_all(anon, url, params={"token": fresh, "after": "1"})
        assert [f.event for f in frames] == ["agent_end"]
        # the list and cancel return tokens too, each for its own run only
        listed = {r["id"]: r["stream_token"]
                  for r in (await api.client.get("/runs")).json()["runs"]}
        assert set(listed) == {run["id"], other["id"]}
        assert [f.id for f in await read_all(anon, url, params={"token": listed[run["id"]]})] \
            == [1, 2]
        assert (await anon.get(url, params={"token": listed[other["id"]]})).status_code == 401
        cancelled = (await api.client.post(f"/runs/{other['id']}/cancel")).json()
        assert cancelled["stream_token"]
        # a token never renews itself, and another tenant gets no token (404)
        assert (await anon.get(f"/runs/{run['id']}", params={"token": fresh})).status_code \
            == 401
        beta = await anon.get(f"/runs/{run['id']}", headers={"Authorization": "Bearer key-b"})
        assert beta.status_code == 404 and "stream_token" not in beta.text


NON_ASCII_TOKENS = ["abc.\u00e9", "\u00e9.abc", "\u00e9", "eyJyIjoi.\u2028\u2029", "a.\U0001f600",
                    "abc.%C3%A9%00"]


async def test_a_non_ascii_stream_token_is_401_not_500() -> None:
    async with serve(api_key="key-a", api_keys=KEYS, worker=False) as api, \
            httpx.AsyncClient(base_url=api.url) as anon:
        run = await api.create()
        for token in NON_ASCII_TOKENS:
            resp = await anon.get(run["events_url"], params={"token": token})
            assert resp.status_code == 401, (token, resp.text)
            assert resp.json()["error"]["code"] == "unauthorized"
        # raw, undecodable bytes in the query string too
        resp = await anon.get(f"{run['events_url']}?token=abc.%FF%FE")
        assert resp.status_code == 401, resp.text
    auth = Authenticator({"k": "t"}, secret=None, token_ttl=60)
    good = auth.issue_token("run_1", "t")
    assert all(auth.verify_token(t, "run_1") is None for t in NON_ASCII_TOKENS)
    assert auth.verify_token(good + "\u00e9", "run_1") is None
    assert auth.verify_token(good, "run_1") is not None
