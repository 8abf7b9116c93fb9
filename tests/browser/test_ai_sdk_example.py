"""examples/ai-sdk-react, built with its own pinned Vite (``vite build``) and run in Chromium
against a server without keys: ``useChat`` renders a tool call that waits for the page's
Approve (the page's ``?approval=``) and the final answer from ``/ai-sdk/chat``, and a reload in
the middle of a run resumes it (``resume: true``) from the stored log. (Behind an agent, with a
client tool, attachments, history and the chat list: test_public_apps.py.)

The built page is served from a second origin, as a deployed frontend would be, so the
dialect is also exercised through CORS.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, Route
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from providers import fake
from tests.api.conftest import serve
from tests.support.live_server import LiveServer
from tool_registry import function

# the first test to need the page also waits for its Vite build; the machine is shared
pytestmark = pytest.mark.timeout(300)

GATE = threading.Event()


@function(toolsets=["browser_testing"])
def example_weather(city: str) -> str:
    """The weather in a city (test tool)."""
    return f"sunny in {city}"


@function(toolsets=["browser_testing"])
async def example_gate() -> str:
    """Waits until the test opens the gate (test tool)."""
    opened = await asyncio.to_thread(GATE.wait, 30)
    return "opened" if opened else "timed out"


def static_site(directory: Path) -> Starlette:
    """The built page, served from an origin of its own."""
    return Starlette(routes=[Mount("/", StaticFiles(directory=directory, html=True))])


async def ask(page: Page, text: str) -> None:
    await page.get_by_label("message").fill(text)
    await page.get_by_role("button", name="Send").click()


async def test_use_chat_renders_a_tool_call_and_the_answer(browser: Browser,
                                                           ai_sdk_page: Path) -> None:
    with LiveServer(static_site(ai_sdk_page)) as static:
        async with serve(cors_origins="*") as api:
            api.fake.script = [fake.tool_calls(("example_weather", {"city": "Paris"})),
                               fake.text("It is sunny in Paris.", chunks=3)]
            page = await browser.new_page()
            await page.goto(f"{static.url}/?api={api.url}&chat=browser-chat-1"
                            "&approval=example_weather")  # the page's approval policy
            await ask(page, "Weather in Paris?")
            waiting = page.locator('[data-testid=tool][data-state="approval-requested"]')
            await waiting.get_by_role("button", name="Approve").click(timeout=30_000)
            tool = page.locator('[data-testid=tool][data-state="output-available"]')
            await tool.wait_for(timeout=30_000)
            assert 'example_weather({"city":"Paris"})' in await tool.inner_text()
            assert "sunny in Paris" in await tool.inner_text()
            answer = page.locator("section.assistant p.text")
            await answer.filter(has_text="It is sunny in Paris.").wait_for(timeout=30_000)
            await page.get_by_test_id("status").filter(has_text="ready").wait_for()
            run_id = await page.get_by_test_id("run").inner_text()
            assert (await api.get(run_id))["status"] == "completed"


@pytest.mark.parametrize("ends", [False, True], ids=["while_resumed", "before_resume"])
async def test_a_reload_resumes_the_running_answer(browser: Browser, ai_sdk_page: Path,
                                                   ends: bool) -> None:
    """The page reloads while the reply runs: its history shows the reply unfinished and the
    resumed stream finishes it. ``before_resume``: the reply ends between the history's load
    and the request for its stream (held until then), which finds none running (204); the
    page loads the history again rather than show the reply unfinished for ever (a race a
    busy machine hit)."""
    GATE.clear()
    with LiveServer(static_site(ai_sdk_page)) as static:
        async with serve(cors_origins="*") as api:
            api.fake.script = [fake.tool_calls(("example_gate", {})),
                               fake.text("The gate opened.")]
            page = await browser.new_page()
            await page.goto(f"{static.url}/?api={api.url}&chat=browser-chat-2-{ends}")
            await ask(page, "Wait for the gate")
            await page.locator('[data-testid=tool][data-state="input-available"]').wait_for(
                timeout=30_000)
            ended = asyncio.Event()

            async def hold(route: Route) -> None:
                await ended.wait()
                await route.continue_()

            if ends:
                await page.route("**/ai-sdk/chat/*/stream", hold)
            await page.reload()  # the page's state is gone; the run is not
            await page.locator('[data-testid=tool][data-state="input-available"]').wait_for(
                timeout=30_000)
            GATE.set()
            if ends:
                run_id = (await api.client.get("/runs")).json()["runs"][0]["id"]
                await api.wait_status(run_id, "completed")
                ended.set()
            answer = page.locator("section.assistant p.text")
            await answer.filter(has_text="The gate opened.").wait_for(timeout=30_000)
