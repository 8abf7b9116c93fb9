"""Approvals and client tools answered from the playground in Chromium: a pick of
``pg_guarded`` (a tool declared with ``approval=True``) approved, one denied with a reason, a
reload while the run waits, a client tool (declared on a run posted to the API, then opened
in the page) answered from its result box, and an approval policy and a client tool set on the
page itself (with the calls' progress shown as text).

What the model got back is read from the fake model's recorded requests; what the person sees,
from the DOM.
"""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import Browser, Page

from providers import fake
from tests.api.conftest import serve
from tests.browser.playground_pages import (
    WAIT,
    current_run,
    ended,
    open_page,
    start_run,
    tools_loaded,
)

GUARDED = [fake.tool_calls(("pg_guarded", {"target": "the files"})),
           fake.text("the final answer")]
LOCATION = {"name": "get_location", "description": "The user's position",
            "parameters": {"type": "object", "properties": {}}}


def tool_result(request: Any) -> Any:
    """The one tool result message of a recorded model request."""
    [result] = [m for m in request.messages if m.role == "tool_result"]
    return result


async def waits_for_approval(page: Page) -> None:
    await page.wait_for_selector(".tool.waiting .ask.approval button.approve", timeout=WAIT)


async def test_a_pick_approved_from_the_page_runs_the_tool(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = list(GUARDED)
        _, page = await open_page(browser, api.url)
        await start_run(page, "change the files")
        await waits_for_approval(page)
        assert await page.inner_text(".tool .tool-state") == "needs approval"
        assert (await page.inner_text("#run-status")).startswith("waiting for you")
        assert (await api.get(await current_run(page)))["status"] == "requires_action"

        await page.reload()  # the log's replay shows the waiting pick again
        await waits_for_approval(page)
        assert await page.locator(".ask").count() == 1
        await page.click(".ask button.approve")
        await ended(page)

        assert await page.locator(".ask").count() == 0
        assert await page.inner_text(".tool.done .result") == "guarded work on the files done"
        assert await page.inner_text(".tool .decision") == "approved"
        assert await page.inner_text("#transcript > .assistant > .text") == "the final answer"
        assert await page.locator("#event-log li[data-type=approval_decided]").count() == 1
        assert not tool_result(api.fake.requests[1]).is_error
        assert page.problems == []  # type: ignore[attr-defined]


async def test_a_pick_denied_with_a_reason_gives_the_model_an_error(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = list(GUARDED)
        _, page = await open_page(browser, api.url)
        await start_run(page, "change the files")
        await waits_for_approval(page)
        await page.fill(".ask input.reason", "not those files")
        await page.click(".ask button.deny")
        await ended(page)

        assert await page.inner_text(".tool .decision") == "denied: not those files"
        assert await page.locator(".tool.failed").count() == 1
        assert "not those files" in await page.inner_text(".tool.failed .result")
        result = tool_result(api.fake.requests[1])
        assert result.is_error and "not those files" in result.content[0].text
        assert await page.inner_text("#transcript > .assistant > .text") == "the final answer"
        assert page.problems == []  # type: ignore[attr-defined]


async def test_a_client_tool_is_answered_from_the_page(browser: Browser) -> None:
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("get_location", {})), fake.text("you are in Berlin")]
        run = await api.create(input="where am I?", client_tools=[LOCATION])
        await api.wait_status(run["id"], "requires_action")
        ctx = await browser.new_context()
        page = await ctx.new_page()
        await page.goto(f"{api.url}/#run={run['id']}")
        box = ".tool.waiting .ask.client-tool"
        await page.wait_for_selector(f"{box} textarea", timeout=WAIT)
        assert await page.inner_text(".tool .tool-state") == "waiting for the page"
        await page.fill(f"{box} textarea", "52.52,13.40")
        await page.click(f"{box} button.send-result")
        await ended(page)

        assert await page.inner_text(".tool .decision") == "result sent"
        assert await page.inner_text(".tool.done .result") == "52.52,13.40"
        assert await page.inner_text("#transcript > .assistant > .text") == "you are in Berlin"
        result = tool_result(api.fake.requests[1])
        assert result.content[0].text == "52.52,13.40" and not result.is_error
        assert (await api.get(run["id"]))["status"] == "completed"
        await ctx.close()


async def test_a_nested_loops_pick_is_approved_from_its_call_card(browser: Browser) -> None:
    """``pg_delegate``'s nested loop picks ``pg_guarded``: the whole run waits; the ask box
    is shown under the delegating call's card (the nested loop's place) and answers it."""
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("pg_delegate", {"task": "inner"}, "o1")),
                           fake.tool_calls(("pg_guarded", {"target": "deep files"}, "n1")),
                           fake.text("inner ok"), fake.text("the final answer")]
        _, page = await open_page(browser, api.url)
        await start_run(page, "delegate it")
        await waits_for_approval(page)
        nested = ".tool[data-call=o1] .nested .tool[data-call=n1]"
        assert await page.locator(f"{nested}.waiting .ask.approval").count() == 1
        assert (await page.inner_text("#run-status")).startswith("waiting for you")
        await page.click(".ask button.approve")
        await ended(page)

        assert await page.inner_text(f"{nested}.done .result") == \
            "guarded work on deep files done"
        assert await page.inner_text(".tool[data-call=o1].done > .result") == \
            "inner said: inner ok"
        assert await page.locator(".ask").count() == 0
        assert not tool_result(api.fake.requests[2]).is_error
        assert page.problems == []  # type: ignore[attr-defined]


async def test_an_approval_policy_and_a_client_tool_set_on_the_page(browser: Browser) -> None:
    """"Ask before running" is the run's ``approval``, "A tool the page runs" its
    ``client_tools``: both of the model's ``pg_report`` picks wait for Approve, its
    ``get_location`` pick for the result typed on the page; each report's progress (a string,
    an object) shows as text, and so do its data part (updated in place) and its state change."""
    schema = {"type": "object", "properties": {"precise": {"type": "boolean"}}}
    async with serve() as api:
        api.fake.script = [fake.tool_calls(("pg_report", {"report": "text"}, "c1"),
                                           ("pg_report", {"report": "object"}, "c2")),
                           fake.tool_calls(("get_location", {"precise": True}, "c3")),
                           fake.text("you are in Berlin")]
        _, page = await open_page(browser, api.url)
        await tools_loaded(page)
        await page.fill("#approval", "pg_report")
        await page.click("#client-tool summary")
        await page.fill("#client-tool-name", "get_location")
        await page.fill("#client-tool-description", "The user's position")
        await page.fill("#client-tool-parameters", "{not json")
        await page.fill("#message", "where am I?")
        await page.click("#send")
        await page.wait_for_selector("#error:not([hidden])", timeout=WAIT)
        assert "(client tool parameters)" in await page.inner_text("#error")
        assert api.fake.requests == [] and "#thread=" not in page.url

        await page.fill("#client-tool-parameters", json.dumps(schema))
        await start_run(page, "where am I?")
        await page.wait_for_selector(".tool[data-call=c2] .ask.approval button.approve",
                                     timeout=WAIT)
        assert await page.inner_text(".tool[data-call=c1] .tool-state") == "needs approval"
        for call in ("c1", "c2"):
            await page.click(f".tool[data-call={call}] .ask button.approve")
        box = ".tool[data-call=c3].waiting .ask.client-tool"
        await page.wait_for_selector(f"{box} textarea", timeout=WAIT)
        await page.fill(f"{box} textarea", "52.52,13.40")
        await page.click(f"{box} button.send-result")
        await ended(page)

        assert await page.inner_text(".tool[data-call=c1] .progress") == "half way there"
        assert await page.inner_text(".tool[data-call=c2] .progress") == \
            '{\n  "done": 2,\n  "of": 4\n}'
        assert await page.inner_text(".tool[data-call=c2] .result") == "reported object"
        assert await page.inner_text(".tool[data-call=c2] .data") == 'card: {"step":2}'
        assert 'state add /reports = 1' in await page.inner_text("#transcript")
        assert await page.inner_text(".tool[data-call=c3] .result") == "52.52,13.40"
        assert await page.inner_text("#transcript > .assistant > .text") == "you are in Berlin"
        [declared] = [t for t in api.fake.requests[0].tools if t.name == "get_location"]
        assert declared.description == "The user's position" and declared.parameters == schema
        results = [m for m in api.fake.requests[2].messages if m.role == "tool_result"]
        assert [r.content[0].text for r in results] == [
            "reported text", "reported object", "52.52,13.40"]
        assert page.problems == []  # type: ignore[attr-defined]
