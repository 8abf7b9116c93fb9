"""A public app with no proxy and no key in the page (issue 29): each example's own backend
mints an end user's token with the API key it alone holds, and the page talks to agentloop
directly with it, renewing it before it expires. Built with the examples' own pinned tools and
driven in Chromium: the AI SDK page behind a Node backend (``server.mjs``), the AG-UI page
behind a FastAPI one (``token_server.py``); and the playground run as an end user.

The agent they run (issue 30) makes ``public_guarded`` wait for approval and accepts the AI
SDK page's client tool ``get_local_time``: the AI SDK page approves, runs its tool, attaches
an image, restores a chat after a reload and lists the user's chats; the AG-UI page answers an
approval from its buttons."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, Request

from providers import fake
from tests.api.conftest import Api, serve
from tests.browser.playground_pages import WAIT, ended, open_page, start_run
from tests.support.live_server import LiveServer, free_port
from tool_registry import function

pytestmark = pytest.mark.timeout(300)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEY = "key-app-secret"
AGENTS = """{"agents": [{"name": "assistant", "model": "fake:test",
  "toolset": "browser_public_testing", "system": "You help the public.",
  "approval": ["public_guarded"],
  "client_tools": [{"name": "get_local_time", "description": "The user's local time"}]}]}"""
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQ"
                       "GAhKmMIQAAAABJRU5ErkJggg==")


@function(toolsets=["browser_public_testing"])
def public_weather(city: str) -> str:
    """The weather in a city (test tool)."""
    return f"sunny in {city}"


@function(toolsets=["browser_public_testing"])
def public_guarded(target: str) -> str:
    """Changes something once the user approved (test tool; the agent asks for approval)."""
    return f"guarded work on {target} done"


@asynccontextmanager
async def agentloop(tmp_path: Path, kind: str, redis_url: str | None) -> AsyncIterator[Api]:
    agents = tmp_path / "agents.json"
    agents.write_text(AGENTS)
    backend = None
    if kind == "redis":
        from app.store import make_backend

        backend = make_backend(redis_url, lease=5.0, run_ttl=3600)
    async with serve(backend=backend, api_keys=f"{KEY}:app", cors_origins="*",
                     agents_file=agents) as api:
        api.client.headers["Authorization"] = f"Bearer {KEY}"
        api.fake.script = [fake.tool_calls(("public_weather", {"city": "Paris"})),
                           fake.text("It is sunny in Paris.", chunks=3),
                           fake.text("Still sunny.", chunks=2)]
        yield api


@pytest.fixture(params=["memory", "redis"])
def kind(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    return request.param, request.getfixturevalue("redis_url") if request.param == "redis" \
        else None


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(500):
        assert proc.poll() is None, "the Node backend exited"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise AssertionError("the Node backend did not listen")


@pytest.fixture
def node_backend(ai_sdk_page: Path) -> Iterator[Any]:
    """``server.mjs`` started for one agentloop (``start(url)``), stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(api_url: str) -> str:
        port = free_port()
        env = {**os.environ, "AGENTLOOP_URL": api_url, "AGENTLOOP_API_KEY": KEY,
               "AGENTLOOP_AGENT": "assistant", "DIST": str(ai_sdk_page), "PORT": str(port)}
        proc = subprocess.Popen(["node", "server.mjs"], cwd=EXAMPLES / "ai-sdk-react",
                                env=env)
        procs.append(proc)
        _wait_port(port, proc)
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


class Traffic:
    """Every request the page makes: none may carry the key; its tokens, in order."""

    def __init__(self, page: Page, api_url: str) -> None:
        self.api_url = api_url
        self.bearers: list[str] = []
        self.token_fetches = 0
        page.on("request", self.seen)

    def seen(self, request: Request) -> None:
        auth = request.headers.get("authorization", "")
        assert KEY not in auth and KEY not in request.url, "the key reached the page"
        if request.url.endswith("/api/token"):
            self.token_fetches += 1
        elif request.url.startswith(self.api_url) and auth:
            self.bearers.append(auth.removeprefix("Bearer "))


async def _asked(page: Page, text: str) -> None:
    await page.get_by_label("message").fill(text)
    await page.get_by_role("button", name="Send").click()


async def test_the_ai_sdk_page_uses_an_end_users_token(browser: Browser, tmp_path: Path,
                                                      kind: tuple[str, str | None],
                                                      node_backend: Any) -> None:
    async with agentloop(tmp_path, *kind) as api:
        site = node_backend(api.url)
        page = await browser.new_page()
        traffic = Traffic(page, api.url)
        # renew 599.5 s before the 600 s token expires: renewed at the next request
        await page.goto(f"{site}/?api={api.url}&token_url=/api/token&renew_before=599.5"
                        f"&chat=public-chat")
        await _asked(page, "Weather in Paris?")
        answer = page.locator("section.assistant p.text")
        await answer.filter(has_text="It is sunny in Paris.").wait_for(timeout=30_000)
        await page.get_by_test_id("status").filter(has_text="ready").wait_for()
        await asyncio.sleep(1.1)  # the token's expiry is in whole seconds: one is due now
        await _asked(page, "And now?")
        await answer.filter(has_text="Still sunny.").wait_for(timeout=30_000)
        assert traffic.token_fetches >= 2 and len(set(traffic.bearers)) >= 2
        run_id = await page.get_by_test_id("run").last.inner_text()
        run = await api.get(run_id)  # the tenant's key sees it: the assistant's, for the user
        assert run["agent"] == "assistant" and run["status"] == "completed"
        other = (await api.client.post("/client_tokens", json={"subject": "someone-else"})
                 ).json()["token"]
        assert (await api.client.get(f"/runs/{run_id}", headers={
            "Authorization": f"Bearer {other}"})).status_code == 404


def _token_server(ag_ui_page: Path, api_url: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        "example_token_server", EXAMPLES / "ag-ui-client" / "token_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.create_app(api_url, KEY, "assistant", ag_ui_page)


async def test_the_ag_ui_page_uses_an_end_users_token(browser: Browser, tmp_path: Path,
                                                     kind: tuple[str, str | None],
                                                     ag_ui_page: Path) -> None:
    async with agentloop(tmp_path, *kind) as api:
        with LiveServer(_token_server(ag_ui_page, api.url)) as site:
            page = await browser.new_page()
            traffic = Traffic(page, api.url)
            await page.goto(f"{site.url}/?api={api.url}&renew_before=599.5")
            await _asked(page, "Weather in Paris?")
            await page.locator("p.assistant", has_text="It is sunny in Paris.").wait_for(
                timeout=30_000)
            assert await page.locator("p.tool").inner_text() == 'public_weather({"city":"Paris"})'
            await page.get_by_test_id("status").filter(has_text="ready").wait_for()
            await asyncio.sleep(1.1)
            await _asked(page, "And now?")
            await page.locator("p.assistant", has_text="Still sunny.").wait_for(timeout=30_000)
            assert traffic.token_fetches >= 2 and len(set(traffic.bearers)) >= 2
            assert await page.locator("p.error").count() == 0


async def test_the_playground_runs_as_an_end_user(browser: Browser, tmp_path: Path) -> None:
    async with agentloop(tmp_path, "memory", None) as api:
        api.fake.script = [fake.text("hello, end user", chunks=2)]
        token = (await api.client.post("/client_tokens", json={
            "subject": "playground-user", "agents": ["assistant"]})).json()["token"]
        _, page = await open_page(browser, api.url)
        dialog = page.locator("#key-dialog")
        await dialog.wait_for(state="visible", timeout=WAIT)
        await dialog.locator("input").fill(token)
        await dialog.locator("input").press("Enter")
        await start_run(page, "hello")
        await ended(page)
        assert "hello, end user" in await page.inner_text("#transcript")
        mine = (await api.client.get("/runs", headers={"Authorization": f"Bearer {token}"})
                ).json()["runs"]
        assert len(mine) == 1 and mine[0]["agent"] == "assistant"


async def test_the_ai_sdk_page_approves_runs_its_tool_attaches_restores_and_lists_chats(
        browser: Browser, tmp_path: Path, node_backend: Any) -> None:
    """One chat: a message with an image; the model calls the page's ``get_local_time``
    (answered by the browser: its time zone) and then ``public_guarded`` (Approve clicked); a
    reload brings the chat back from its history. A second chat joins the chat list, and the
    first opens from it."""
    async with agentloop(tmp_path, "memory", None) as api:
        api.fake.script = [fake.tool_calls(("get_local_time", {})),
                           fake.tool_calls(("public_guarded", {"target": "the files"})),
                           fake.text("Done, late evening in Paris."), fake.text("Hello again.")]
        site = node_backend(api.url)
        context = await browser.new_context(timezone_id="Europe/Paris")
        page = await context.new_page()
        Traffic(page, api.url)
        await page.goto(f"{site}/?api={api.url}&token_url=/api/token&chat=chat-one")
        await page.get_by_label("attach files").set_input_files(
            {"name": "dot.png", "mimeType": "image/png", "buffer": PNG})
        await _asked(page, "What time is it here? See the picture.")
        waiting = page.locator('[data-testid=tool][data-state="approval-requested"]')
        await waiting.get_by_role("button", name="Approve").click(timeout=30_000)
        answer = page.locator("section.assistant p.text")
        await answer.filter(has_text="Done, late evening in Paris.").wait_for(timeout=30_000)
        await page.get_by_test_id("status").filter(has_text="ready").wait_for()

        prompt = api.fake.requests[0].messages[-1]
        assert [(b.type, getattr(b, "mime_type", None)) for b in prompt.content] == [
            ("image", "image/png"), ("text", None)]
        [local_time] = [m for m in api.fake.requests[1].messages if m.role == "tool_result"]
        assert '"timeZone":"Europe/Paris"' in local_time.content[0].text
        done = page.locator('[data-testid=tool][data-state="output-available"]')
        shown = await done.all_inner_texts()
        assert "Europe/Paris" in shown[0] and "guarded work on the files done" in shown[1]
        assert await page.locator("section.user img.file").count() == 1

        await page.reload()  # the chat comes back from GET /ai-sdk/chat/{id}/messages
        await answer.filter(has_text="Done, late evening in Paris.").wait_for(timeout=30_000)
        assert await page.locator("section.user img.file").count() == 1
        shown = await done.all_inner_texts()
        assert "Europe/Paris" in shown[0] and "guarded work on the files done" in shown[1]
        assert len(api.fake.requests) == 3  # nothing asked again

        chats = page.get_by_test_id("chats").locator("button")
        await page.locator('[data-chat="chat-one"][aria-current="true"]').wait_for()
        assert await chats.count() == 1
        await page.get_by_role("button", name="New chat").click()
        await page.wait_for_url(lambda url: "chat=chat-one" not in url)
        await _asked(page, "Hello?")
        await answer.filter(has_text="Hello again.").wait_for(timeout=30_000)
        await chats.nth(1).wait_for(timeout=30_000)  # the new chat listed, newest first
        assert await chats.nth(1).get_attribute("data-chat") == "chat-one"
        await chats.nth(1).click()
        await answer.filter(has_text="Done, late evening in Paris.").wait_for(timeout=30_000)
        assert "chat=chat-one" in page.url
        assert await answer.filter(has_text="Hello again.").count() == 0
        await context.close()


async def test_the_ag_ui_page_answers_an_approval(browser: Browser, tmp_path: Path,
                                                  ag_ui_page: Path) -> None:
    """The agent's ``public_guarded`` waits: the page shows the call with Approve / Deny (from
    the ``agentloop.approval_requested`` CUSTOM event), a click posts the decision, and the
    same AG-UI stream goes on to the tool's result and the answer."""
    async with agentloop(tmp_path, "memory", None) as api:
        api.fake.script = [fake.tool_calls(("public_guarded", {"target": "the files"})),
                           fake.text("The files are changed.")]
        with LiveServer(_token_server(ag_ui_page, api.url)) as site:
            page = await browser.new_page()
            await page.goto(f"{site.url}/?api={api.url}")
            await _asked(page, "Change the files")
            ask = page.locator("p.approval", has_text='public_guarded({"target":"the files"})')
            await ask.get_by_role("button", name="Approve").click(timeout=30_000)
            await page.locator("p.assistant", has_text="The files are changed.").wait_for(
                timeout=30_000)
            assert await page.locator("p.result").inner_text() == "guarded work on the files done"
            assert (await ask.inner_text()).endswith("approved")
            assert await page.locator("p.error").count() == 0
            [result] = [m for m in api.fake.requests[1].messages if m.role == "tool_result"]
            assert not result.is_error
