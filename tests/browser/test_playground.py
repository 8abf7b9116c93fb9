"""The playground in Chromium: a run started, steered, followed up, withdrawn from, cancelled
and reloaded from the page, with a slow tool (``pg_slow``) the test releases.

Every assertion reads the DOM the person sees; the event log panel (one item per event, with
its seq) shows each event arrived exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.async_api import Browser, Page

from providers import fake
from tests.api.conftest import serve
from tests.browser.playground_pages import (
    GATE,
    WAIT,
    current_run,
    ended,
    event_seqs,
    open_page,
    start_run,
    tools_loaded,
)

SLOW_TWICE = [fake.tool_calls(("pg_slow", {"label": "one"}), ("pg_slow", {"label": "two"}),
                              ("pg_slow", {"label": "three"})),
              fake.text("the final answer", chunks=4)]


@pytest.fixture(autouse=True)
def gate() -> Iterator[None]:
    GATE.clear()
    yield
    GATE.set()  # a tool still waiting finishes at once


async def running_tool(page: Page) -> None:
    await page.wait_for_selector(".tool.running .tool-state:text('running…')", timeout=WAIT)


async def texts(page: Page, selector: str) -> list[str]:
    return [t.strip() for t in await page.locator(selector).all_inner_texts()]


async def test_a_run_started_and_steered_from_the_page(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = list(SLOW_TWICE)
        _, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await page.check("#tools input[value=pg_slow]")
        await start_run(page, "please do the slow thing")
        await running_tool(page)
        await page.fill("#message", "change of plan: stop after the first")
        await page.click("#steer")
        await page.wait_for_selector("#queue li.steer:has-text('change of plan')", timeout=WAIT)
        GATE.set()
        await ended(page)

        assert await texts(page, ".tool .tool-name") == ["pg_slow"] * 3
        assert await texts(page, ".tool .result") == [
            "slow work one finished", "Skipped due to queued user message.",
            "Skipped due to queued user message."]
        assert await page.locator(".tool.skipped").count() == 2
        assert await texts(page, ".user.steer .text") == ["change of plan: stop after the first"]
        assert await texts(page, ".assistant .text") == ["the final answer"]
        assert '"label": "two"' in (await texts(page, ".tool .args"))[1]
        assert await page.is_hidden("#queue")
        assert await page.is_visible("#send") and await page.is_hidden("#cancel")
        assert api.fake.requests[0].tools[0].name == "pg_slow"  # the tool ticked on the page
        seqs = await event_seqs(page)
        assert seqs == list(range(1, len(seqs) + 1))
        assert not await page.is_visible("#key-dialog")  # auth off: never asked for a key
        assert page.problems == []  # type: ignore[attr-defined]


async def test_a_reload_mid_run_resumes_the_run_where_it_was(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = list(SLOW_TWICE)
        context, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await start_run(page, "please do the slow thing")
        await running_tool(page)
        before = await event_seqs(page)
        assert "#thread=" in page.url

        await page.reload()
        await running_tool(page)  # the transcript rebuilt from the log, the tool still running
        after = await event_seqs(page)
        assert after[:len(before)] == before and after == list(range(1, len(after) + 1))
        await page.fill("#message", "steered after the reload")
        await page.click("#steer")
        await page.wait_for_selector("#queue li.steer", timeout=WAIT)
        GATE.set()
        await ended(page)
        seqs = await event_seqs(page)
        assert seqs == list(range(1, len(seqs) + 1))  # nothing twice, nothing missing
        assert await texts(page, ".assistant .text") == ["the final answer"]
        assert await texts(page, ".user.steer .text") == ["steered after the reload"]

        # the address without the run: the tab's sessionStorage still knows it
        await page.goto(api.url + "/")
        await ended(page)
        assert await event_seqs(page) == seqs
        assert page.problems == []  # type: ignore[attr-defined]
        await context.close()


async def test_follow_ups_queue_and_one_is_withdrawn(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("pg_slow", {"label": "one"})),
                           fake.text("first answer"), fake.text("second answer")]
        _, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await start_run(page, "work slowly")
        await running_tool(page)
        for text in ("keep this one", "withdraw this one"):
            await page.fill("#message", text)
            await page.click("#follow-up")
            await page.wait_for_selector(f"#queue li.follow_up:has-text('{text}')", timeout=WAIT)
        await page.click("#queue li:has-text('withdraw this one') button.withdraw")
        await page.wait_for_selector("#queue li:has-text('withdraw this one')", state="detached",
                                     timeout=WAIT)
        assert await texts(page, "#queue li .text") == ["keep this one"]
        GATE.set()
        await ended(page)

        assert await texts(page, ".user.follow_up .text") == ["keep this one"]
        assert await texts(page, ".assistant .text") == ["first answer", "second answer"]
        assert "withdraw this one" not in await page.inner_text("#transcript")
        assert await page.locator("#event-log li[data-type=message_withdrawn]").count() == 1
        sent = [m.content for m in api.fake.requests[2].messages if m.role == "user"]
        assert sent == ["work slowly", "keep this one"]


async def test_cancel_from_the_page_stops_the_running_tool(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("pg_slow", {"label": "one"}))]
        _, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await start_run(page, "work slowly")
        await running_tool(page)
        await page.click("#cancel")
        await ended(page, "aborted")
        assert await page.locator(".tool.failed").count() == 1
        assert (await api.get(await current_run(page)))["status"] == "cancelled"
        assert await page.is_hidden("#cancel") and await page.is_visible("#send")
        assert await page.inner_text("#run-status") == "cancelled · fake:test"


async def test_a_nested_run_shows_under_its_tool_call(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("pg_delegate", {"task": "look around"})),
                           fake.text("inner done", chunks=2), fake.text("outer done")]
        _, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await start_run(page, "delegate it")
        await ended(page)
        nested = ".tool:has(.tool-name:text-is('pg_delegate')) .nested"
        assert await texts(page, f"{nested} .assistant .text") == ["inner done"]
        assert await texts(page, f"{nested} .end") == ["nested loop ended: stop · 15 tokens"]
        assert await texts(page, "#transcript > .assistant > .text") == ["outer done"]


WATCH = """() => {
  const seen = window.watched = {args: [], text: []};
  new MutationObserver(() => {
    for (const node of document.querySelectorAll('#transcript .tool .args')) {
      if (seen.args.at(-1) !== node.textContent) seen.args.push(node.textContent);
    }
    for (const node of document.querySelectorAll('#transcript > .assistant > .text')) {
      if (seen.text.at(-1) !== node.textContent) seen.text.push(node.textContent);
    }
  }).observe(document.getElementById('transcript'),
             {subtree: true, childList: true, characterData: true});
}"""


async def test_text_and_arguments_show_as_they_stream(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("pg_delegate", {"task": "a task in four pieces"}),
                                           arg_chunks=4, delay=0.05),
                           fake.text("inner"),
                           fake.text("the answer arrives in pieces", chunks=4, delay=0.05)]
        _, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await page.evaluate(WATCH)
        await start_run(page, "go")
        await ended(page)
        watched = await page.evaluate("window.watched")
    raw = '{"task": "a task in four pieces"}'
    partial = [a for a in watched["args"] if a and raw.startswith(a) and a != raw]
    assert len(partial) >= 2, watched["args"]  # the raw JSON growing, piece by piece
    assert watched["args"][-1] == '{\n  "task": "a task in four pieces"\n}'  # then parsed
    growing = [t for t in watched["text"] if t and t != "the answer arrives in pieces"]
    assert len(growing) >= 2 and all("the answer arrives in pieces".startswith(t)
                                     for t in growing), watched["text"]
