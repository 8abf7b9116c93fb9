#!/usr/bin/env python3
"""Regenerate docs/screenshots/*.png: the playground in Chromium, driving a scripted run.

The model is the tests' scripted fake provider (labelled ``fake:scripted`` on the page), so
the pictures are the same every time and need no key or network: a run whose first pick (a
slow code search) is steered, its second pick skipped, a nested loop under its tool call and
the final answer; once live with the steer queued, once finished, once on a phone; and a
pick of a tool that needs approval, waiting for the person's Approve or Deny.

    .venv/bin/python scripts/screenshots.py
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.async_api import Browser, Page, async_playwright  # noqa: E402

from app import runtime  # noqa: E402
from app.config import Settings  # noqa: E402
from app.process.main import create_app  # noqa: E402
from app.store.memory.backend import MemoryBackend  # noqa: E402
from providers import fake  # noqa: E402
from tests.browser.conftest import CHROMIUM, FLAGS  # noqa: E402
from tests.support.live_server import LiveServer  # noqa: E402
from tool_registry import function  # noqa: E402

OUT = ROOT / "docs" / "screenshots"
GATE = threading.Event()
WAIT = 30_000


@function(toolsets=["screenshots"])
async def search_code(pattern: str, path: str) -> str:
    """Searches the code base (slow: waits for the script).

    Args:
        pattern: what to look for
        path: where
    """
    await asyncio.to_thread(GATE.wait, 60)
    return f"src/loop.py:88: # {pattern}: bound the retries\nsrc/api.py:12: # {pattern}: paging"


@function(toolsets=["screenshots"])
async def summarize(task: str) -> str:
    """Asks a nested loop for a summary.

    Args:
        task: what to summarize
    """
    return (await runtime.exec(task)).text


@function(toolsets=["screenshots"], approval=True)
async def delete_branch(name: str) -> str:
    """Deletes a git branch (asks a person first).

    Args:
        name: the branch
    """
    return f"deleted {name}"


APPROVAL_SCRIPT = [
    fake.tool_calls(("delete_branch", {"name": "feature/old-ui"}),
                    text_before="It is merged into main; I'll delete it."),
    fake.text("Deleted feature/old-ui."),
]

SCRIPT = [
    fake.tool_calls(("search_code", {"pattern": "TODO", "path": "src/"}),
                    ("search_code", {"pattern": "TODO", "path": "tests/"}),
                    text_before="I'll search the sources and the tests for TODOs.",
                    arg_chunks=4, delay=0.01),
    fake.tool_calls(("summarize", {"task": "Summarize the TODOs found in src/"})),
    fake.text("Two TODOs: retries are unbounded, and the list endpoint does not page.",
              chunks=6, delay=0.01),
    fake.text("There are 2 TODOs in src/ (tests skipped, as you asked):\n\n"
              "1. src/loop.py:88: bound the retries.\n2. src/api.py:12: add paging.",
              chunks=12, delay=0.02),
]


def serve(script: list[fake.ScriptItem] = SCRIPT) -> tuple[LiveServer, fake.FakeProvider]:
    provider = fake.FakeProvider(script=list(script))
    settings = Settings(_env_file=None, default_model="fake:scripted",  # type: ignore[call-arg]
                        log_format="text", log_level="WARNING")
    app = create_app(settings, backend=MemoryBackend(),
                     resolve_provider=lambda spec: (provider, "scripted"))
    return LiveServer(app), provider


async def steered_run(page: Page, url: str, shots: dict[str, str]) -> None:
    await page.goto(url + "/")
    await page.wait_for_selector("#tools input[value=summarize]", state="attached", timeout=WAIT)
    if not await page.evaluate("document.getElementById('settings').open"):
        await page.click("#settings summary")  # a phone starts with the panel closed
    for name in ("search_code", "summarize"):
        await page.check(f"#tools input[value={name}]")
    await page.fill("#message", "Find the TODOs in this project and summarize them.")
    await page.click("#send")
    await page.wait_for_selector(".tool.running .tool-state:text('running…')", timeout=WAIT)
    await page.fill("#message", "Only src/ matters, skip the tests.")
    await page.click("#steer")
    await page.wait_for_selector("#queue li.steer", timeout=WAIT)
    await page.fill("#message", "Then suggest which one to fix first.")
    await page.click("#follow-up")
    await page.wait_for_selector("#queue li.follow_up", timeout=WAIT)
    await page.fill("#message", "")
    if "live" in shots:
        await page.screenshot(path=OUT / shots["live"])
    await page.click("#queue li.follow_up button.withdraw")
    await page.wait_for_selector("#queue li.follow_up", state="detached", timeout=WAIT)
    GATE.set()
    await page.wait_for_selector(".end:text('run ended: stop')", timeout=WAIT)
    if await page.evaluate("matchMedia('(max-width: 760px)').matches"):
        await page.click("#settings summary")  # closed again: the transcript is the picture
    # the whole page in one viewport (a full-page capture would show the sticky composer
    # in the middle of the transcript)
    width = page.viewport_size["width"] if page.viewport_size else 1280
    height = await page.evaluate("document.documentElement.scrollHeight")
    await page.set_viewport_size({"width": width, "height": height})
    await page.screenshot(path=OUT / shots["done"])


async def waiting_pick(browser: Browser, url: str) -> None:
    """A conversation whose pick of ``delete_branch`` waits for Approve or Deny."""
    context = await browser.new_context(viewport={"width": 1280, "height": 600})
    page = await context.new_page()
    await page.goto(url + "/")
    await page.wait_for_selector("#tools input[value=delete_branch]", state="attached",
                                 timeout=WAIT)
    await page.check("#tools input[value=delete_branch]")
    await page.fill("#message", "Delete the branch feature/old-ui if it is merged.")
    await page.click("#send")
    await page.wait_for_selector(".ask.approval button.approve", timeout=WAIT)
    await page.evaluate("window.scrollTo(0, 0)")
    await page.screenshot(path=OUT / "playground-approval.png")
    await page.click(".ask button.approve")
    await page.wait_for_selector(".end:text('run ended: stop')", timeout=WAIT)
    await context.close()


async def shoot(browser: Browser, url: str, viewport: dict[str, int], shots: dict[str, str],
                **options: object) -> None:
    GATE.clear()
    context = await browser.new_context(viewport=viewport, **options)  # type: ignore[arg-type]
    await steered_run(await context.new_page(), url, shots)
    await context.close()


async def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        for viewport, shots, options in [
                ({"width": 1280, "height": 800},
                 {"live": "playground-live.png", "done": "playground.png"}, {}),
                ({"width": 390, "height": 844}, {"done": "playground-phone.png"},
                 {"device_scale_factor": 2, "is_mobile": True, "has_touch": True})]:
            server, _ = serve()
            with server:
                await shoot(browser, server.url, viewport, shots, **options)
        server, _ = serve(APPROVAL_SCRIPT)
        with server:
            await waiting_pick(browser, server.url)
        await browser.close()
    print("wrote", ", ".join(sorted(p.name for p in OUT.glob("*.png"))))


if __name__ == "__main__":
    asyncio.run(main())
