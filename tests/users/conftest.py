"""End users over a real socket, on both backends: a tenant's API key (``key-t``: tenant
``t``; ``key-u``: tenant ``u``) mints client tokens for its users, who run the agents of an
agents file. The model is ``tests.control``'s ``CommandProvider`` (the input says what it
does: ``park <x>`` waits for an approval, ``client <x>`` for a client tool, anything else is
echoed), so one package-scoped server per backend serves every test here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.process.main import create_app
from tests.api.conftest import make_settings
from tests.control.conftest import CLIENT_TOOL, TOOLSET, CommandProvider
from tests.support.live_server import LiveServer, client_limits
from tests.support.redis_server import redis_server_url, redis_url
from tests.support.stores import shared_store

__all__ = ["redis_server_url", "redis_url"]

ADMIN = "key-t"
AGENTS = f"""
agents:
  - name: support
    description: answers, with approval for its guarded tool
    model: fake:test
    system: You are the support agent.
    toolset: {TOOLSET}
    approval: [table_guarded]
  - name: open
    model: fake:test
    toolset: {TOOLSET}
    overridable: [input, system, metadata, temperature, max_iterations]
    client_tools:
      - name: {CLIENT_TOOL['name']}
        description: {CLIENT_TOOL['description']}
        parameters: {{type: object, properties: {{q: {{type: string}}}}}}
  - name: strict
    model: fake:test
    toolset: none
    max_iterations: 1
"""


@dataclass
class Users:
    """The package's server: an admin client (the tenant's key) and end users' clients."""

    kind: str
    url: str
    server: LiveServer
    provider: CommandProvider
    backend: Any
    admin: httpx.AsyncClient

    async def token(self, subject: str, **grant: Any) -> str:
        """A client token for ``subject`` minted with the tenant's key."""
        resp = await self.admin.post("/client_tokens", json={"subject": subject, **grant})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["token"])

    def client(self, credential: str) -> httpx.AsyncClient:
        """A client sending ``credential`` as its bearer (close it)."""
        return httpx.AsyncClient(base_url=self.url, timeout=httpx.Timeout(30.0),
                                 limits=client_limits(),
                                 headers={"Authorization": f"Bearer {credential}"})


@pytest.fixture(scope="package")
def agents_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agents") / "agents.yaml"
    path.write_text(AGENTS)
    return path


@pytest.fixture(scope="package", params=["memory", "redis"])
def users_server(request: pytest.FixtureRequest, agents_file: Path
                 ) -> Iterator[tuple[str, LiveServer, CommandProvider, Any]]:
    provider = CommandProvider()
    store = shared_store(request, request.param)
    settings = make_settings(api_keys=f"{ADMIN}:t,key-u:u", agents_file=agents_file)
    app = create_app(settings, backend=store,
                     resolve_provider=lambda spec: (provider, spec.split(":", 1)[-1]))
    with LiveServer(app) as server:
        yield request.param, server, provider, store


@pytest.fixture
async def users(users_server: tuple[str, LiveServer, CommandProvider, Any]
                ) -> AsyncIterator[Users]:
    kind, server, provider, store = users_server
    async with httpx.AsyncClient(base_url=server.url, timeout=httpx.Timeout(30.0),
                                 limits=client_limits(),
                                 headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
        yield Users(kind, server.url, server, provider, store, admin)
