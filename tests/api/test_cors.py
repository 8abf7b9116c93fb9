"""CORS (``AGENTLOOP_CORS_ORIGINS``): what a page on another origin may send and read.

``*`` serves any page (the API never uses cookies: a bearer header or ``?token=``); a list of
origins is echoed back and also admits credentialed requests. The headers a page needs to read
(``Location`` of a new run, ``Retry-After`` of a 503, ...) are exposed. The real browser side is
in tests/browser/test_cors.py and test_eventsource.py.
"""

from __future__ import annotations

from app.process.main import EXPOSED_HEADERS
from tests.api.conftest import serve
from tests.api.test_events import end
from tests.api.test_stream_end import finish

PAGE = "http://localhost:5173"


def _exposed(headers: object) -> set[str]:
    value = headers.get("access-control-expose-headers", "")  # type: ignore[attr-defined]
    return {h.strip().lower() for h in value.split(",") if h.strip()}


async def test_any_origin_with_star_and_the_headers_a_page_reads() -> None:
    async with serve(worker=False, cors_origins="*", api_key="key-a",
                     api_keys="key-a:alpha") as api:
        pre = await api.client.options("/runs", headers={
            "Origin": PAGE, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,idempotency-key"})
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "*"
        assert set(pre.headers["access-control-allow-headers"].lower().split(",")) >= {
            "authorization", "content-type", "idempotency-key"}
        created = await api.client.post("/runs", json={"input": "x"}, headers={"Origin": PAGE})
        assert created.status_code == 201
        assert created.headers["access-control-allow-origin"] == "*"
        assert {"location", "retry-after", "www-authenticate"} <= _exposed(created.headers)
        assert "access-control-allow-credentials" not in created.headers
        run = created.json()
        # the 204 that stops an EventSource carries CORS too (without it the browser would see
        # a network error and reconnect forever)
        await finish(api, run["id"], end())
        resp = await api.client.get(run["events_url"], headers={"Origin": PAGE,
                                                                 "Last-Event-ID": "2"})
        assert resp.status_code == 204 and resp.headers["access-control-allow-origin"] == "*"
        denied = await api.client.get("/runs", headers={"Origin": PAGE,
                                                        "Authorization": "Bearer nope"})
        assert denied.status_code == 401 and denied.headers["access-control-allow-origin"] == "*"


async def test_listed_origins_are_echoed_and_may_send_credentials() -> None:
    async with serve(worker=False, cors_origins=f"{PAGE},https://app.example") as api:
        resp = await api.client.get("/runs", headers={"Origin": PAGE})
        assert resp.headers["access-control-allow-origin"] == PAGE
        assert resp.headers["access-control-allow-credentials"] == "true"
        assert "origin" in resp.headers["vary"].lower()
        assert _exposed(resp.headers) == {h.lower() for h in EXPOSED_HEADERS}
        other = await api.client.get("/runs", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers


async def test_cors_is_off_by_default() -> None:
    async with serve(worker=False) as api:
        resp = await api.client.get("/runs", headers={"Origin": PAGE})
        assert "access-control-allow-origin" not in resp.headers
