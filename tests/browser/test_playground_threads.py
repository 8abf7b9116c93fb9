"""One conversation, one thread, in Chromium: two turns typed on the page become two runs of
one thread (the second run's model request carries the first turn's history), the page keeps a
single subscription to the thread's events, a reload rebuilds the whole conversation, and the
list of recent conversations shows it once.
"""

from __future__ import annotations

from playwright.async_api import Browser, Page

from providers import fake
from tests.api.conftest import serve
from tests.browser.playground_pages import WAIT, open_page, start_run


async def turns_ended(page: Page, count: int) -> None:
    """``count`` runs of the conversation have ended (each its own ``run ended`` line)."""
    await page.wait_for_selector(f"#transcript > .end >> nth={count - 1}", timeout=WAIT)


async def ids(page: Page) -> list[str]:
    return await page.eval_on_selector_all("#event-log li", "items => items.map(i => i.dataset.id)")


async def test_two_turns_share_one_thread_and_survive_a_reload(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.text("answer one"), fake.text("answer two")]
        context, page = await open_page(browser, api.url)
        streams: list[str] = []
        page.on("request", lambda r: streams.append(r.url) if "/events" in r.url else None)
        await start_run(page, "first question")
        await turns_ended(page, 1)
        await page.fill("#message", "second question")
        await page.click("#send")
        await turns_ended(page, 2)

        answers = await page.locator("#transcript > .assistant > .text").all_inner_texts()
        assert answers == ["answer one", "answer two"]
        second = api.fake.requests[1].messages
        assert [m.role for m in second] == ["user", "assistant", "user"]
        assert [m.content for m in second if m.role == "user"] == ["first question",
                                                                  "second question"]
        thread_id = page.url.split("#thread=")[1]
        thread = (await api.client.get(f"/threads/{thread_id}")).json()
        assert len(thread["runs"]) == 2 and thread["status"] == "idle"
        before = await ids(page)
        assert [i.split("-")[0] for i in before].count("2") > 0  # the second run's events
        assert len(streams) == 1, streams  # one subscription for the whole conversation
        assert f"/threads/{thread_id}/events" in streams[0]

        await page.reload()
        await turns_ended(page, 2)
        assert await ids(page) == before  # each event once, in the thread's order
        assert await page.locator("#transcript > .user .text").all_inner_texts() == [
            "first question", "second question"]
        await page.goto(api.url + "/")  # the tab's sessionStorage still knows the thread
        await turns_ended(page, 2)
        assert page.url.endswith(f"#thread={thread_id}")
        assert len(api.fake.requests) == 2

        # the list shows the conversation once: at its newest run, titled by its first
        entry = f"#runs li.current [data-thread='{thread_id}'][data-run='{thread['runs'][1]}']"
        await page.wait_for_selector(f"{entry} .run-meta:has-text('2 turns')", timeout=WAIT)
        assert await page.locator("#runs li").count() == 1
        assert await page.inner_text(f"{entry} .run-title") == "first question"

        await page.click("#new-run")  # a new conversation: nothing on screen, no thread
        await page.wait_for_selector("#transcript .hint", timeout=WAIT)
        assert "#thread=" not in page.url
        await page.click(f"#runs [data-thread='{thread_id}']")
        await turns_ended(page, 2)  # opens its whole conversation
        assert page.url.endswith(f"#thread={thread_id}") and await ids(page) == before
        assert page.problems == []  # type: ignore[attr-defined]
        await context.close()  # the thread's stream never ends by itself
