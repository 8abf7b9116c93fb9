"""Chromium's own ``EventSource`` on a real run: every event exactly once across a dropped
connection, a nested loop's ``agent_end`` that is not the end, and no reconnect loop after it.

The page opens ``new EventSource(url)`` with a stream token, from the service's origin
(127.0.0.1) and from another origin (localhost, CORS ``*``), through a TCP proxy the test cuts
mid-run. The server records every
events request it answers; the run waits at a gate tool until the browser has reconnected.
After the run's ``agent_end`` the browser must reconnect once, get ``204`` and stop.
"""

from __future__ import annotations

import asyncio
import threading
import time
import typing
from collections.abc import Callable
from typing import Any

import pytest
from playwright.async_api import Browser, Page

from app import runtime
from app.engine.events import Event
from app.store import make_backend
from providers import fake
from tests.api.conftest import serve
from tests.support.tcp_proxy import TcpProxy
from tool_registry import function

RETRY = 0.3
"""The ``retry:`` hint the server sends in these tests (Chromium's own default is 3 s)."""
GATE = threading.Event()
TYPES = [cls.__dataclass_fields__["type"].default for cls in typing.get_args(Event)]

OPEN = """({url, types}) => {
  const seen = window.seen = {opens: 0, errors: 0, events: [], unnamed: [], closed: false};
  const source = new EventSource(url);
  source.onopen = () => { seen.opens += 1; };
  source.onerror = () => {
    seen.errors += 1;
    if (source.readyState === EventSource.CLOSED) seen.closed = true;
  };
  source.onmessage = (e) => seen.unnamed.push(e.data);  // an event without a type: never
  for (const type of types) {
    source.addEventListener(type, (e) => {
      const data = JSON.parse(e.data);
      seen.events.push({id: e.lastEventId, type, seq: data.seq, depth: data.depth,
                        tool_name: data.tool_name ?? null});
    });
  }
}"""


@function(toolsets=["browser_testing"])
async def browser_delegate(task: str) -> str:
    """Runs a nested loop (test tool)."""
    out = await runtime.exec(task)
    return f"inner said: {out.text}"


@function(toolsets=["browser_testing"])
async def browser_gate() -> str:
    """Waits until the test opens the gate (test tool)."""
    opened = await asyncio.to_thread(GATE.wait, 30)
    return "opened" if opened else "timed out"


class Recorder:
    """ASGI middleware noting every ``GET .../events`` the server answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def wrap(self, app: Any) -> Any:
        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["method"] != "GET" \
                    or not scope["path"].endswith("/events"):
                await app(scope, receive, send)
                return
            headers = dict(scope["headers"])
            entry = {"last_event_id": headers.get(b"last-event-id", b"").decode() or None,
                     "status": None, "at": time.monotonic()}
            self.requests.append(entry)

            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start":
                    entry["status"] = message["status"]
                await send(message)

            await app(scope, receive, sending)

        return recorded


async def until(check: Callable[[], bool], what: str, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def page_until(page: Page, condition: str, what: str, recorder: Recorder) -> None:
    try:
        await page.wait_for_function(f"() => {condition}", timeout=20_000)
    except Exception as exc:
        seen = await page.evaluate("() => window.seen")
        seen["events"] = seen["events"][-3:]
        raise AssertionError(f"timed out waiting for {what}; requests: {recorder.requests}; "
                             f"page (last events): {seen}") from exc


def script() -> list[fake.Step]:
    return [fake.tool_calls(("browser_delegate", {"task": "look around"})),
            fake.text("inner done", chunks=2),                        # the nested loop
            fake.tool_calls(("browser_gate", {})),
            fake.text("the final answer", chunks=4, delay=0.02)]


@pytest.mark.parametrize(("origin", "store"), [("same-origin", "memory"),
                                               ("cross-origin", "memory"),
                                               ("same-origin", "redis")])
async def test_eventsource_gets_every_event_once_and_stops_after_the_end(
        browser: Browser, origin: str, store: str, request: pytest.FixtureRequest) -> None:
    """On Redis the first connection opens from what the run's create wrote
    (``app.store.fresh_runs``), the reconnect and the 204 from the store."""
    GATE.clear()
    recorder = Recorder()
    settings: dict[str, Any] = {"api_keys": "key-a:alpha", "sse_retry_seconds": RETRY}
    if origin == "cross-origin":
        settings["cors_origins"] = "*"
    backend = None
    if store == "redis":
        backend = make_backend(request.getfixturevalue("redis_url"), lease=5.0, run_ttl=3600)
    async with serve(api_key="key-a", wrap=recorder.wrap, backend=backend, **settings) as api, \
            TcpProxy(api.server.port) as proxy:
        api.fake.script = script()
        run = await api.create(tools=["browser_delegate", "browser_gate"])
        if store == "redis":  # the browser's first request takes the create's first page
            assert api.backend.fresh_runs.get(run["id"]) is not None
        host = "127.0.0.1" if origin == "same-origin" else "localhost"
        page = await browser.new_page()
        # any page the origin really serves over loopback (Chromium refuses a page it cannot
        # place in an address space, e.g. one fulfilled by page.route, access to loopback)
        await page.goto(f"http://{host}:{proxy.port}/healthz")
        url = f"{proxy.url}{run['events_url']}?token={run['stream_token']}"
        await page.evaluate(OPEN, {"url": url, "types": TYPES})

        await page_until(page, "window.seen.events.some(e => e.type === 'tool_execution_start'"
                         " && e.tool_name === 'browser_gate')", "the gate tool", recorder)
        severed = time.monotonic()
        proxy.sever()  # the connection drops mid-run: the browser reconnects by itself
        await until(lambda: len(recorder.requests) >= 2 and recorder.requests[1]["status"],
                    "the browser's reconnect")
        GATE.set()
        await page_until(page, "window.seen.closed", "the EventSource to close", recorder)
        closed = len(recorder.requests)
        await asyncio.sleep(5 * RETRY)  # a bounded quiet period: any reconnect would show
        seen = await page.evaluate("() => window.seen")
        requests = list(recorder.requests)

    events = seen["events"]
    last = events[-1]["seq"]
    assert [e["seq"] for e in events] == list(range(1, last + 1))  # each exactly once
    assert all(e["id"] == str(e["seq"]) for e in events)
    assert seen["unnamed"] == []
    assert (events[-1]["type"], events[-1]["depth"]) == ("agent_end", 0)
    nested_end = next(i for i, e in enumerate(events) if e["type"] == "agent_end")
    assert events[nested_end]["depth"] == 1
    after_nested = [e["type"] for e in events[nested_end + 1:] if e["depth"] == 0]
    assert after_nested.count("message_update") >= 4  # the final answer came after it
    # the first connection, the reconnect mid-run, one reconnect after the end (204), no more
    assert [r["status"] for r in requests] == [200, 200, 204], requests
    resumed_at = requests[1]["last_event_id"]
    assert resumed_at is not None and 1 < int(resumed_at) < last
    assert requests[2]["last_event_id"] == str(last)
    assert closed == len(requests) == 3
    assert seen["opens"] == 2 and seen["closed"]
    # the retry hint was honoured (Chromium's default delay is 3 s)
    assert requests[1]["at"] - severed < 2.5, requests[1]["at"] - severed
