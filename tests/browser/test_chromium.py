"""The browser harness itself: the system Chromium loads a page from a live local server."""

from __future__ import annotations

from playwright.async_api import Browser

from tests.api.conftest import serve


async def test_chromium_reads_a_page_of_the_live_service(browser: Browser) -> None:
    async with serve() as api:
        page = await browser.new_page()
        response = await page.goto(api.url + "/healthz")
        assert response is not None and response.status == 200
        assert "ok" in await page.content()
