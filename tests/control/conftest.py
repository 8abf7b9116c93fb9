"""The state × action table of docs/events.md, cell by cell, over a real socket on both
backends.

One server per backend serves the whole package (``table``); its worker is started and stopped
by the tests (``Table.worker``), so a run can be left ``queued`` for as long as a cell needs.
The model is ``CommandProvider``: the last user message says what it does (``hold <key>``
picks a tool that runs until the test opens its gate, then a second tool in the same turn;
``park`` picks a tool that needs approval; ``client`` a client tool; anything else is echoed),
so each run's course is fixed by its input, whatever order runs come in.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.process.main import create_app
from app.worker.worker import Worker
from providers.base import ModelRequest
from providers.events import ProviderEvent
from providers.fake import Step, text, tool_calls
from providers.messages import AssistantMessage, ToolResultMessage, UserMessage
from tests.api.conftest import make_settings
from tests.support.live_server import LiveServer, client_limits
from tests.support.redis_server import redis_server_url
from tests.support.stores import shared_store
from tool_registry import function

__all__ = ["redis_server_url"]

GATES: dict[str, threading.Event] = {}
ENTERED: dict[str, threading.Event] = {}
TOOLSET = "table_testing"
CLIENT_TOOL = {"name": "table_ask", "description": "asks the page",
               "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}


def gate(key: str) -> threading.Event:
    """The gate ``hold <key>`` waits for (opened by the test)."""
    return GATES.setdefault(key, threading.Event())


def entered(key: str) -> threading.Event:
    """Set once ``hold <key>``'s tool is running."""
    return ENTERED.setdefault(key, threading.Event())


@function(toolsets=[TOOLSET])
async def table_hold(key: str) -> str:
    """Runs until the test opens the gate ``key`` (test tool)."""
    entered(key).set()
    async with asyncio.timeout(120):
        while not gate(key).is_set():
            await asyncio.sleep(0.01)
    return f"held {key}"


@function(toolsets=[TOOLSET])
def table_note(text: str) -> str:
    """Notes (test tool)."""
    return f"noted {text}"


@function(toolsets=[TOOLSET], approval=True)
def table_guarded(text: str) -> str:
    """Needs approval (test tool)."""
    return f"guarded {text}"


def _stacks() -> str:
    """Every task on the running loop, with where it waits."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        task.print_stack(limit=8, file=out)
    return out.getvalue()


def _last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            content = message.content
            return content if isinstance(content, str) else "".join(
                getattr(b, "text", "") for b in content)
    return ""


def reply(request: ModelRequest) -> Step:
    """What the model does with ``request`` (see the module docstring)."""
    last = request.messages[-1] if request.messages else None
    if isinstance(last, ToolResultMessage):
        results = [m for m in request.messages[request.messages.index(
            next(m for m in reversed(request.messages) if isinstance(m, AssistantMessage))) + 1:]
                   if isinstance(m, ToolResultMessage)]
        said = "; ".join("".join(getattr(b, "text", "") for b in m.content) for m in results)
        return text(f"done: {said}")
    words = _last_user_text(request).split()
    if words[:1] == ["hold"]:
        return tool_calls(("table_hold", {"key": words[1]}, f"hold-{words[1]}"),
                          ("table_note", {"text": "after"}, f"note-{words[1]}"))
    if words[:1] == ["park"]:
        return tool_calls(("table_guarded", {"text": words[1]}, f"guard-{words[1]}"))
    if words[:1] == ["client"]:
        return tool_calls(("table_ask", {"q": words[1]}, f"ask-{words[1]}"))
    return text(f"echo: {' '.join(words)}")


@dataclass
class CommandProvider:
    """See the module docstring; ``requests`` by the last user text that started them."""

    name: str = "table"
    requests: list[ModelRequest] = field(default_factory=list)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(request)
        for event in reply(request).events:
            yield event

    def asked(self, marker: str) -> list[ModelRequest]:
        """The model calls whose messages mention ``marker``."""
        return [r for r in self.requests if any(marker in str(m) for m in r.messages)]


@dataclass
class Table:
    """The package's server: its client, provider, backend and worker switch."""

    kind: str
    server: LiveServer
    client: httpx.AsyncClient
    provider: CommandProvider
    backend: Any
    _stop: asyncio.Event | None = None
    _task: asyncio.Task[None] | None = None

    async def worker_on(self) -> None:
        """Start the worker on the server's loop (claims what is queued)."""
        if self._task is None:
            self._task = await self.server.call(self._start())

    async def _start(self) -> asyncio.Task[None]:
        self._stop = asyncio.Event()
        worker = Worker(self.backend, lambda spec: (self.provider, spec.split(":", 1)[-1]),
                        concurrency=50, lease=5.0, heartbeat=0.5)
        return asyncio.create_task(worker.run(self._stop))

    async def worker_off(self) -> None:
        """Stop it (the runs it holds are handed back)."""
        if self._task is not None:
            stop, task = self._stop, self._task
            self._task = self._stop = None

            async def halt() -> None:
                assert stop is not None
                stop.set()
                try:
                    async with asyncio.timeout(30):
                        await asyncio.shield(task)
                except TimeoutError:  # say what holds it, rather than hang the session
                    raise AssertionError("the worker did not stop within 30 s; its tasks:\n"
                                         + _stacks()) from None

            await self.server.call(halt())

    async def run(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def status(self, run_id: str, *statuses: str, within: float = 30.0
                     ) -> dict[str, Any]:
        """The run once its status is one of ``statuses``."""
        deadline = time.monotonic() + within
        while True:
            run = await self.run(run_id)
            if run["status"] in statuses:
                return run
            assert time.monotonic() < deadline, f"run stuck in {run['status']}: {run}"
            await asyncio.sleep(0.02)

    async def create(self, input: str, **body: Any) -> dict[str, Any]:
        body.setdefault("toolset", TOOLSET)
        resp = await self.client.post("/runs", json={"input": input, **body})
        assert resp.status_code == 201, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def thread(self) -> str:
        resp = await self.client.post("/threads", json={})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    async def post(self, thread_id: str, input: str, **body: Any) -> httpx.Response:
        body.setdefault("toolset", TOOLSET)
        return await self.client.post(f"/threads/{thread_id}/runs",
                                      json={"input": input, **body})

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's log so far, as event bodies (read from the store)."""
        stored = await self.server.call(self.backend.read_events(run_id, 0))
        import orjson
        return [orjson.loads(e.data) for e in stored]


@pytest.fixture(scope="package", params=["memory", "redis"])
def table_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, LiveServer,
                                                                   CommandProvider, Any]]:
    """The package's server on each backend (no worker: ``Table.worker_on``)."""
    provider = CommandProvider()
    store = shared_store(request, request.param)
    app = create_app(make_settings(max_queued_messages=3), backend=store, worker=False,
                     resolve_provider=lambda spec: (provider, spec.split(":", 1)[-1]))
    with LiveServer(app) as server:
        yield request.param, server, provider, store


@pytest.fixture
async def table(table_server: tuple[str, LiveServer, CommandProvider, Any]
                ) -> AsyncIterator[Table]:
    """The package's server, a client of this test's, and a worker switched off at the end."""
    kind, server, provider, store = table_server
    async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(30.0),
                                 limits=client_limits()) as client:
        t = Table(kind, server, client, provider, store)
        try:
            yield t
        finally:
            for key in list(GATES):  # nothing of this test keeps running
                gate(key).set()
            await t.worker_off()


@asynccontextmanager
async def held(key: str) -> AsyncIterator[None]:
    """A gate for ``hold <key>`` that is open again when the block ends."""
    gate(key).clear()
    entered(key).clear()
    try:
        yield
    finally:
        gate(key).set()


async def until_entered(key: str, within: float = 30.0) -> None:
    """Until ``hold <key>``'s tool runs."""
    async with asyncio.timeout(within):
        while not entered(key).is_set():
            await asyncio.sleep(0.01)
