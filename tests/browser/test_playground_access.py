"""The playground with auth on (a key typed once per tab), on a phone, and its recent runs."""

from __future__ import annotations

from playwright.async_api import Browser, Page

from providers import fake
from tests.api.conftest import serve
from tests.browser.playground_pages import WAIT, ended, open_page, start_run, tools_loaded

PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2,
         "is_mobile": True, "has_touch": True}


async def type_key(page: Page, key: str) -> None:
    dialog = page.locator("#key-dialog")
    await dialog.wait_for(state="visible", timeout=WAIT)
    await dialog.locator("input").fill(key)
    await dialog.locator("input").press("Enter")


async def test_auth_on_the_key_is_asked_once_per_tab(browser: Browser) -> None:
    async with serve(api_keys="key-a:alpha") as api:
        api.fake.script = [fake.text("hello from behind a key", chunks=3)]
        context, page = await open_page(browser, api.url)
        await type_key(page, "not-a-key")      # a wrong key: asked again
        await type_key(page, "key-a")
        await tools_loaded(page)
        await start_run(page, "hello")
        await ended(page)
        assert await page.evaluate("sessionStorage.getItem('agentloop.key')") == "key-a"

        await page.reload()                    # the same tab: no second question
        await ended(page)
        assert await page.is_hidden("#key-dialog")
        assert "hello from behind a key" in await page.inner_text("#transcript")
        runs = (await api.client.get("/runs", headers={"Authorization": "Bearer key-a"})).json()
        assert [r["metadata"]["source"] for r in runs["runs"]] == ["playground"]
        # the only errors: the two 401s that made the page ask (Chromium logs failed loads)
        assert all("401" in p for p in page.problems), page.problems  # type: ignore[attr-defined]
        await context.close()

        _, fresh = await open_page(browser, api.url)  # another tab (context): asked again
        await fresh.locator("#key-dialog").wait_for(state="visible", timeout=WAIT)


async def test_usable_on_a_phone(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("pg_delegate", {"task": "look"})),
                           fake.text("inner"), fake.text("a phone-sized answer", chunks=3)]
        _, page = await open_page(browser, api.url, **PHONE)
        await tools_loaded(page)
        assert not await page.evaluate("document.getElementById('settings').open")
        await page.fill("#message", "delegate it please")
        await page.tap("#send")
        await ended(page)
        # nothing wider than the screen (a mobile viewport grows innerWidth to fit what
        # overflows, so the bound is the device's 390 px)
        width = await page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert width[0] <= 390 and width[1] <= 390, width
        box = await page.locator("#send").bounding_box()
        assert box is not None and box["height"] >= 32 and box["x"] + box["width"] <= 390
        nested = await page.locator(".tool .nested").bounding_box()
        assert nested is not None and nested["x"] + nested["width"] <= 390
        assert page.problems == []  # type: ignore[attr-defined]


async def test_recent_runs_open_from_the_list(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.text("answer one"), fake.text("answer two")]
        first = await api.create(input="first question")
        await api.wait_status(first["id"], "completed")
        second = await api.create(input="second question")
        await api.wait_status(second["id"], "completed")
        _, page = await open_page(browser, api.url)
        await page.wait_for_selector(f"#runs [data-run='{first['id']}']", timeout=WAIT)
        titles = await page.locator("#runs .run-title").all_inner_texts()
        assert titles == ["second question", "first question"]  # newest first

        await page.click(f"#runs [data-run='{first['id']}']")
        await page.wait_for_selector("#transcript .assistant .text:text-is('answer one')",
                                     timeout=WAIT)
        await ended(page)
        assert page.url.endswith(f"#run={first['id']}")
        assert "answer two" not in await page.inner_text("#transcript")
        await page.wait_for_selector(f"#runs li.current [data-run='{first['id']}']",
                                     timeout=WAIT)
