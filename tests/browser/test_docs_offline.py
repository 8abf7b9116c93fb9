"""``/docs`` (Swagger UI) and ``/redoc`` render in Chromium with every request that leaves the
server refused: their assets ship with the package, none comes from a CDN (ReDoc's footer
logo aside)."""

from __future__ import annotations

from playwright.async_api import Browser, Page, Route

from tests.api.conftest import serve


async def offline_page(browser: Browser, origin: str, refused: list[str]) -> Page:
    """A page whose requests to anywhere but ``origin`` fail (and are recorded)."""
    page = await browser.new_page()

    async def only_local(route: Route) -> None:
        if route.request.url.startswith(origin):
            await route.continue_()
        else:
            refused.append(route.request.url)
            await route.abort()

    await page.route("**/*", only_local)
    return page


async def test_swagger_ui_renders_offline(browser: Browser) -> None:
    async with serve(worker=False) as api:
        refused: list[str] = []
        page = await offline_page(browser, api.url, refused)
        await page.goto(api.url + "/docs")
        # Swagger UI lists each operation once it has loaded and parsed /openapi.json
        operation = page.locator("#operations-runs-createRun")
        await operation.wait_for(timeout=30_000)
        assert "/runs" in await operation.inner_text()
        assert await page.locator("#operations-events-streamRunEvents").count() == 1
        assert refused == []


async def test_redoc_renders_offline(browser: Browser) -> None:
    async with serve(worker=False) as api:
        refused: list[str] = []
        page = await offline_page(browser, api.url, refused)
        await page.goto(api.url + "/redoc")
        # ReDoc titles each operation with its summary once it has parsed /openapi.json
        await page.get_by_text("Create Run", exact=True).first.wait_for(timeout=30_000,
                                                                         state="attached")
        assert "Default: 20." in await page.inner_text("body")
        # the bundle's "API docs by Redocly" footer points at its logo on a CDN: a missing
        # image, nothing the page needs
        assert set(refused) <= {"https://cdn.redoc.ly/redoc/logo-mini.svg"}
