"""Thread tests: the real app under uvicorn on each backend, with providers of our own.

``EchoProvider`` answers every model call with ``echo: <the last user message>`` after a
random pause of up to a few milliseconds (so races interleave differently each trial);
``GatedProvider`` holds each call until the test opens its gate (a run stays busy exactly as
long as a test needs, no sleeps).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.process.main import create_app
from app.store.memory.backend import MemoryBackend
from providers.base import ModelRequest
from providers.events import ProviderEvent
from providers.fake import Step, text, tool_calls
from providers.messages import ToolResultMessage, UserMessage
from tests.api.conftest import make_settings
from tests.support.live_server import LiveServer, client_limits
from tests.support.redis_server import redis_server_url, redis_url

__all__ = ["redis_server_url", "redis_url"]


def last_user_text(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            content = message.content
            return content if isinstance(content, str) else str(content)
    return ""


@dataclass
class EchoProvider:
    """Replies ``echo: <last user text>``; records the requests."""

    name: str = "echo"
    jitter: float = 0.003
    requests: list[ModelRequest] = field(default_factory=list)
    gate: threading.Event | None = None
    """When set: every call waits for it (opened by the test) before replying."""
    hang: bool = False
    """Calls never reply (until cancelled)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(request)
        if self.gate is not None:
            gate = self.gate
            await asyncio.to_thread(gate.wait, 60)
        elif self.jitter:
            await asyncio.sleep(random.random() * self.jitter)
        if self.hang:
            await asyncio.Event().wait()
        for event in self._reply(request).events:
            yield event

    @staticmethod
    def _reply(request: ModelRequest) -> Step:
        """``call <tool> <json args>`` calls that tool once; anything else is echoed."""
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolResultMessage):
            said = "".join(getattr(block, "text", "") for block in last.content)
            return text(f"tool said: {said}")
        words = last_user_text(request).split(" ", 2)
        if len(words) == 3 and words[0] == "call":
            return tool_calls((words[1], json.loads(words[2])))
        return text(f"echo: {last_user_text(request)}")


@dataclass
class ThreadApi:
    url: str
    client: httpx.AsyncClient
    provider: EchoProvider
    backend: Any
    server: LiveServer
    kind: str

    async def new_thread(self, **metadata: str) -> str:
        resp = await self.client.post("/threads", json={"metadata": metadata})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    async def post(self, thread_id: str, content: str, expect: int | None = None,
                   **body: Any) -> httpx.Response:
        resp = await self.client.post(f"/threads/{thread_id}/runs",
                                      json={"input": content, **body})
        if expect is not None:
            assert resp.status_code == expect, resp.text
        return resp

    async def thread(self, thread_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/threads/{thread_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def run(self, run_id: str) -> dict[str, Any]:
        resp = await self.client.get(f"/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def wait_idle(self, thread_id: str, within: float = 60.0) -> dict[str, Any]:
        """The thread once no run is active or waiting (polled: the API has no idle event)."""
        deadline = time.monotonic() + within
        while True:
            thread = await self.thread(thread_id)
            if thread["status"] == "idle" and thread["next_run"] is None:
                return thread
            assert time.monotonic() < deadline, f"thread stuck busy: {thread}"
            await asyncio.sleep(0.01)

    async def wait_run(self, run_id: str, *statuses: str, within: float = 60.0
                       ) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while True:
            run = await self.run(run_id)
            if run["status"] in statuses:
                return run
            assert time.monotonic() < deadline, f"run stuck in {run['status']}"
            await asyncio.sleep(0.01)


@asynccontextmanager
async def serve_threads(kind: str, redis: str | None = None, **overrides: Any
                        ) -> AsyncIterator[ThreadApi]:
    provider = EchoProvider()
    if kind in ("redis", "cluster"):
        from app.store import make_backend

        store: Any = make_backend(redis, lease=5.0, run_ttl=3600, cluster=kind == "cluster")
    else:
        store = MemoryBackend(lease=5.0)
    app = create_app(make_settings(**overrides), backend=store,
                     resolve_provider=lambda spec: (provider, spec.split(":", 1)[-1]))
    with LiveServer(app) as server:
        limits = client_limits(max_connections=64)
        async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(30.0),
                                     limits=limits) as client:
            yield ThreadApi(server.url, client, provider, store, server, kind)


@pytest.fixture(params=["memory", "redis", "cluster"])
async def tapi(request: pytest.FixtureRequest) -> AsyncIterator[ThreadApi]:
    """The server with an embedded worker and the echo provider, on each backend (a thread
    and its runs share one slot on the cluster)."""
    url = {"memory": None, "redis": "redis_url", "cluster": "cluster_url"}[request.param]
    redis = request.getfixturevalue(url) if url else None
    async with serve_threads(request.param, redis) as running:
        yield running
