"""API keys, tenant isolation and stream tokens."""

from __future__ import annotations

import httpx

from app.auth import Authenticator
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
    from app.backends.base import EventBatch
    from app.events import AgentEnd, encode_event_body, utc_now
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
