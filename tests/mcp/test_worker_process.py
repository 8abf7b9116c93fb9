"""A separate worker process (``agentloop worker``) connects to the operator's MCP servers
itself, and to a run's own servers from the run's record; arguments are checked there, and a
run parked on an MCP tool's approval goes on once answered."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from app.process.main import create_app
from app.store import make_backend
from providers.fake import FakeProvider
from tests.api.conftest import fake_resolver, make_settings
from tests.mcp.conftest import ROOT, HttpServer
from tests.support.live_server import LiveServer, client_limits


@pytest.fixture
def split(redis_server_url: str, mcp_http: HttpServer) -> Iterator[tuple[str, str]]:
    """The API (no worker) and one worker process over a Redis db of their own."""
    url = redis_server_url.rsplit("/", 1)[0] + "/9"
    flush = redis.Redis.from_url(url)
    flush.flushdb()
    flush.close()
    declared = json.dumps({
        "web": {"url": f"{mcp_http.url}/mcp", "allowed_tools": ["add"]},
        "guard": {"url": f"{mcp_http.url}/mcp", "allowed_tools": ["add"], "approval": "always"}})
    allow = f"{mcp_http.url}/*"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AGENTLOOP_")},
           "AGENTLOOP_REDIS_URL": url, "AGENTLOOP_MCP_SERVERS": declared,
           "AGENTLOOP_FETCH_ALLOW_PRIVATE": "true", "AGENTLOOP_LOG_FORMAT": "text",
           "AGENTLOOP_PROVIDER_FACTORY": "tests.mcp.scripted:factory",
           "AGENTLOOP_WORKSPACE_SWEEP_SECONDS": "0", "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen([sys.executable, "-m", "app.process.cli", "worker"], cwd=ROOT,
                              env=env, stdout=subprocess.DEVNULL)
    app = create_app(make_settings(mcp_servers=declared, mcp_allow_urls=allow,
                                   fetch_allow_private=True),
                     backend=make_backend(url, lease=5.0, run_ttl=3600),
                     resolve_provider=fake_resolver(FakeProvider()), worker=False)
    try:
        with LiveServer(app, startup_timeout=60) as server:
            yield server.url, f"{mcp_http.url}/mcp"
    finally:
        worker.terminate()
        worker.wait(30)


async def finished(client: httpx.AsyncClient, run_id: str,
                   *statuses: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60  # the worker process starts meanwhile
    while True:
        run = (await client.get(f"/runs/{run_id}")).json()
        if run["status"] in (statuses or ("completed", "failed", "cancelled")):
            return run  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)


async def test_a_worker_process_connects_to_operator_and_run_servers(
        split: tuple[str, str]) -> None:
    api, mcp_url = split
    async with httpx.AsyncClient(base_url=api, timeout=30, limits=client_limits()) as client:
        declared = await client.post("/runs", json={
            "input": 'call web__add {"a": 20, "b": 22}', "toolset": "mcp:web"})
        own = await client.post("/runs", json={
            "input": 'call mine__pid {}', "tools": [],
            "mcp_servers": [{"name": "mine", "url": mcp_url}]})
        assert declared.status_code == own.status_code == 201, own.text
        invalid = await client.post("/runs", json={
            "input": 'call web__add {"a": "x", "b": 1}', "toolset": "mcp:web"})
        guarded = await client.post("/runs", json={
            "input": 'call guard__add {"a": 1, "b": 2}', "toolset": "mcp:guard"})
        first = await finished(client, declared.json()["id"])
        second = await finished(client, own.json()["id"])
        third = await finished(client, invalid.json()["id"])
        parked = await finished(client, guarded.json()["id"], "requires_action")
        [pending] = parked["pending"]
        answer = await client.post(f"/runs/{parked['id']}/approvals", json={
            "tool_call_id": pending["tool_call_id"], "decision": "approve"})
        assert answer.status_code == 202, answer.text
        fourth = await finished(client, parked["id"])
    assert (first["status"], first["result"]) == ("completed", "done: 42")
    assert second["status"] == "completed" and second["result"].removeprefix("done: ").isdigit()
    assert "a: expected integer" in third["result"]
    assert (pending["tool_name"], fourth["result"]) == ("guard__add", "done: 3")
