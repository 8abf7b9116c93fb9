"""MCP tests: real MCP servers (``tests/mcp/server.py``, the official SDK's ``FastMCP``) and
the real app on each backend, its model scripted (``FakeProvider``).

One HTTP server process serves the session (streamable HTTP at ``/mcp``, SSE at ``/sse``);
a second one (``mortal``) is killed and started again by the test of a server that dies; the
stdio server is the app's own child. One app per backend serves the package, with every
server declared once under several names (each name a toolset with its own settings).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.process.main import create_app
from providers.fake import FakeProvider, ScriptItem
from tests.api.conftest import fake_resolver, make_settings
from tests.support.live_server import LiveServer, client_limits, free_port
from tests.support.redis_server import redis_server_url
from tests.support.stores import shared_store

__all__ = ["redis_server_url"]

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "tests.mcp.server"]
ALLOW_URLS = "http://127.0.0.1:*/mcp,https://mcp.example.com/*"


@dataclass
class HttpServer:
    """An MCP server process on a fixed port (so it can be killed and started again)."""

    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen([*SERVER, "http", str(self.port)], cwd=ROOT,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, "the MCP test server exited"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                assert time.monotonic() < deadline, "the MCP test server did not come up"
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(scope="session")
def mcp_http() -> Iterator[HttpServer]:
    server = HttpServer(free_port())
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def mortal() -> Iterator[HttpServer]:
    server = HttpServer(free_port())
    server.start()
    yield server
    server.kill()


def servers(http: str, mortal: str) -> dict[str, Any]:
    """The operator's declaration: one server under several names."""
    stdio = {"command": [*SERVER, "stdio"], "env": {"PYTHONPATH": str(ROOT)}}
    return {
        "web": {"url": f"{http}/mcp", "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"}},
        "legacy": {"url": f"{http}/sse", "transport": "sse", "allowed_tools": ["add", "pid"]},
        "local": {**stdio, "allowed_tools": ["add", "pid", "hang"]},
        "short": {"url": f"{http}/mcp", "timeout": 0.5, "allowed_tools": ["hang"]},
        "guarded": {"url": f"{http}/mcp", "approval": ["add"], "allowed_tools": ["add", "pid"]},
        "lazy": {"url": f"{http}/mcp", "defer": True, "allowed_tools": ["pid"]},
        "mortal": {"url": f"{mortal}/mcp", "allowed_tools": ["hang", "pid"]},
    }


@dataclass
class McpApp:
    kind: str
    server: LiveServer
    fake: FakeProvider
    backend: Any


@pytest.fixture(scope="package", params=["memory", "redis"])
def mcp_app(request: pytest.FixtureRequest, mcp_http: HttpServer, mortal: HttpServer,
            monkeypatch_package: pytest.MonkeyPatch) -> Iterator[McpApp]:
    """The app with the servers of ``servers`` on one backend; a run may add servers at
    ``ALLOW_URLS`` (loopback, which the SSRF guard refuses unless a test stands it in for a
    public address)."""
    monkeypatch_package.setenv("MCP_TEST_TOKEN", "s3cret")
    store = shared_store(request, request.param)
    fake = FakeProvider()
    settings = make_settings(mcp_servers=json.dumps(servers(mcp_http.url, mortal.url)),
                             mcp_allow_urls=ALLOW_URLS)
    app = create_app(settings, backend=store, resolve_provider=fake_resolver(fake))
    with LiveServer(app, startup_timeout=60) as server:
        yield McpApp(request.param, server, fake, store)


@pytest.fixture(scope="package")
def monkeypatch_package() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@dataclass
class Client:
    app: McpApp
    http: httpx.AsyncClient

    @property
    def fake(self) -> FakeProvider:
        return self.app.fake

    async def run(self, *script: ScriptItem, expect: int = 201, **body: Any) -> dict[str, Any]:
        """A run whose model plays ``script``."""
        self.fake.script = list(script)
        self.fake.calls = 0
        self.fake.requests.clear()
        body.setdefault("input", "go")
        resp = await self.http.post("/runs", json=body)
        assert resp.status_code == expect, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def status(self, run_id: str, *statuses: str, within: float = 30.0
                     ) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while True:
            resp = await self.http.get(f"/runs/{run_id}")
            run = resp.json()
            if run["status"] in statuses:
                return run  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, f"run stuck in {run['status']}: {run}"
            await asyncio.sleep(0.02)

    async def events(self, run_id: str) -> list[dict[str, Any]]:
        stored = await self.app.server.call(self.app.backend.read_events(run_id, 0))
        return [orjson.loads(e.data) for e in stored]

    async def until(self, run_id: str, kind: str, within: float = 30.0) -> dict[str, Any]:
        """The run's first event of type ``kind``, once it is written."""
        deadline = time.monotonic() + within
        while True:
            for event in await self.events(run_id):
                if event["type"] == kind:
                    return event
            assert time.monotonic() < deadline, f"no {kind} event"
            await asyncio.sleep(0.02)

    async def ends(self, run_id: str) -> list[dict[str, Any]]:
        """The run's tool_execution_end events once it finished."""
        await self.status(run_id, "completed", "failed", "cancelled")
        return [e for e in await self.events(run_id) if e["type"] == "tool_execution_end"]


@pytest.fixture
async def mcp(mcp_app: McpApp) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(base_url=mcp_app.server.url, timeout=httpx.Timeout(30.0),
                                 limits=client_limits()) as http:
        yield Client(mcp_app, http)


def text_of(end: dict[str, Any]) -> str:
    """The text of a tool_execution_end's result."""
    return "".join(b.get("text", "") for b in end["result"]["content"])
