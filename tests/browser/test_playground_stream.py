"""The playground's stream across trouble: a dropped connection after the stream token
expired (the browser's reconnect gets 401, the page renews the token with ``GET /runs/{id}``
and reopens after its last seq), and failures shown on the page."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from playwright.async_api import Browser

from providers import fake
from tests.api.conftest import serve
from tests.browser.playground_pages import (
    GATE,
    WAIT,
    ended,
    event_seqs,
    open_page,
    start_run,
    tools_loaded,
)
from tests.browser.test_eventsource import Recorder
from tests.support.tcp_proxy import TcpProxy

TTL = 2
"""Seconds a stream token lives in the renewal test (short, yet long enough for a reopen to
use its fresh token on a loaded machine)."""


@pytest.fixture(autouse=True)
def gate() -> Iterator[None]:
    GATE.clear()
    yield
    GATE.set()


async def test_an_expired_token_is_renewed_and_the_stream_goes_on(browser: Browser) -> None:
    recorder = Recorder()
    async with serve(api_keys="key-a:alpha", stream_token_ttl=TTL, sse_retry_seconds=0.2,
                     wrap=recorder.wrap) as api, TcpProxy(api.server.port) as proxy:
        api.fake.script = [fake.tool_calls(("pg_slow", {"label": "one"})),
                           fake.text("answer after the renewal", chunks=3)]
        _, page = await open_page(browser, proxy.url)
        await page.locator("#key-dialog input").fill("key-a")
        await page.locator("#key-dialog input").press("Enter")
        await tools_loaded(page)
        await start_run(page, "work slowly")
        await page.wait_for_selector(".tool.running .tool-state:text('running…')", timeout=WAIT)
        # (a loaded machine may open the page's first stream after its token expired: the
        # page renews it then too; what counts is the stream that was open when cut)
        opened = [r for r in recorder.requests if r["status"] == 200][-1]
        before = len(recorder.requests)
        await asyncio.sleep(max(0.0, opened["at"] + TTL + 0.2 - time.monotonic()))
        proxy.sever()  # the browser reconnects with the old token: 401, EventSource closes
        deadline = time.monotonic() + 20
        while [r["status"] for r in recorder.requests[before:]][-1:] != [200] \
                or 401 not in [r["status"] for r in recorder.requests[before:]]:
            assert time.monotonic() < deadline, recorder.requests
            await asyncio.sleep(0.02)
        GATE.set()
        await ended(page)

    seqs = await event_seqs(page)
    assert seqs == list(range(1, len(seqs) + 1))  # nothing twice, nothing lost
    after_cut = [r["status"] for r in recorder.requests[before:]]
    assert after_cut[0] == 401 and after_cut[-1] == 200, recorder.requests  # renewed
    assert "answer after the renewal" in await page.inner_text("#transcript")


async def test_failures_are_shown_on_the_page(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.error("the model is down")]
        _, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await page.fill("#model", "nosuchprovider:model")
        await page.fill("#message", "hello")
        await page.click("#send")
        await page.wait_for_selector("#error:not([hidden])", timeout=WAIT)
        assert "(model)" in await page.inner_text("#error")  # the field the API named
        assert await page.input_value("#message") == "hello"  # kept for another try

        await page.fill("#model", "")
        await page.click("#send")
        await page.wait_for_url(lambda url: "#thread=" in url, timeout=WAIT)
        await ended(page, "error")
        assert "the model is down" in await page.inner_text("#transcript .error")
        assert await page.inner_text("#run-status") == "failed · fake:test"
        assert await page.is_hidden("#error")
