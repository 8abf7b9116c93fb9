"""The playground page under test: a gate tool the test opens, and a page that records every
console error and CSP violation (a page that works only because an error went unnoticed is not
working).

``pg_slow`` waits on ``GATE`` (polled, so a cancel stops it at once); ``pg_delegate`` runs a
nested loop; ``pg_guarded`` needs a person's approval; ``pg_report`` reports progress. All live
in the ``playground_testing`` toolset.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from playwright.async_api import Browser, BrowserContext, Page

from app import runtime
from tool_registry import Progress, ToolContext, function

GATE = threading.Event()
WAIT = 20_000
"""Milliseconds a page condition may take (generous: the machine is shared and loaded)."""


@function(toolsets=["playground_testing"])
async def pg_slow(label: str) -> str:
    """Works until the test opens the gate (test tool).

    Args:
        label: which call this is
    """
    deadline = time.monotonic() + 30
    while not GATE.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return f"slow work {label} finished"


@function(toolsets=["playground_testing"])
async def pg_delegate(task: str) -> str:
    """Hands the task to a nested loop (test tool).

    Args:
        task: what the nested loop is asked
    """
    out = await runtime.exec(task)
    return f"inner said: {out.text}"


@function(toolsets=["playground_testing"], approval=True)
async def pg_guarded(target: str) -> str:
    """Changes something only after a person approved the call (test tool).

    Args:
        target: what it changes
    """
    return f"guarded work on {target} done"


@function(toolsets=["playground_testing"])
def pg_report(report: str, progress: Progress, ctx: ToolContext) -> str:
    """Reports its progress, as a string or as an object, then finishes (test tool). The
    object report also sends a data part (twice: the second updates the first) and changes
    the run's shared state.

    Args:
        report: "text" or "object": what the progress report is
    """
    progress("half way there" if report == "text" else {"done": 2, "of": 4})
    if report == "object":
        ctx.emit_data("card", {"step": 1}, id="k")
        ctx.emit_data("card", {"step": 2}, id="k")
        ctx.update_state([{"op": "add", "path": "/reports", "value": 1}])
    return f"reported {report}"


async def open_page(browser: Browser, url: str, **context: Any) -> tuple[BrowserContext, Page]:
    """A fresh context (its own sessionStorage) on the playground at ``url``."""
    ctx = await browser.new_context(**context)
    page = await ctx.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.problems = problems  # type: ignore[attr-defined]
    await page.goto(url + "/")
    return ctx, page


async def tools_loaded(page: Page) -> None:
    await page.wait_for_selector("#tools input[value=pg_slow]", state="attached", timeout=WAIT)


async def start_run(page: Page, text: str) -> None:
    await page.fill("#message", text)
    await page.click("#send")
    # the conversation is shown (a quick run may already have ended: its cancel button gone
    # again) (a page condition polled as a string would be an eval, which the page's CSP
    # refuses)
    await page.wait_for_url(lambda url: "#thread=" in url, timeout=WAIT)
    await page.wait_for_selector("#event-log li[data-type=run_created]", state="attached",
                                 timeout=WAIT)


async def current_run(page: Page) -> str:
    """The id of the run the page shows (a conversation's active or last run)."""
    return str(await page.evaluate("() => window.playground.run.id"))


async def event_seqs(page: Page) -> list[int]:
    return [int(s) for s in await page.eval_on_selector_all(
        "#event-log li", "items => items.map(i => i.dataset.seq)")]


async def ended(page: Page, reason: str = "stop") -> None:
    await page.wait_for_selector(f".end:text('run ended: {reason}')", timeout=WAIT)
