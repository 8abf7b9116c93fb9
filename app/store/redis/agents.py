"""``AgentStore`` on Redis: per tenant, an index hash (name → latest version) and a list of
versions per agent, all in the tenant's agents slot; a new version is one script
(``PUT_AGENT``)."""

from __future__ import annotations

from typing import Any

import orjson

from app.store.errors import AgentExists
from app.store.records import AgentRecord, now
from app.store.redis import keys
from app.store.redis.core import RedisCore
from app.store.redis.errors import guard


def _entry(created_at: float, definition: dict[str, Any]) -> bytes:
    return repr(created_at).encode() + b"\t" + orjson.dumps(definition)


def _record(name: str, version: int, raw: bytes) -> AgentRecord:
    created, _, body = raw.partition(b"\t")
    return AgentRecord(name=name, version=version, definition=orjson.loads(body),
                       created_at=float(created))


class RedisAgents(RedisCore):
    """See ``app.store.contract.AgentStore``."""

    @guard
    async def put_agent(self, tenant: str, name: str, definition: dict[str, Any], *,
                        create: bool) -> AgentRecord:
        """See ``AgentStore.put_agent``."""
        created = now()
        version = int(await self._run(
            "PUT_AGENT", [keys.agents_key(tenant), keys.agent_versions_key(tenant, name)],
            [name, _entry(created, definition), "1" if create else ""]))
        if version == 0:
            raise AgentExists(name)
        return AgentRecord(name=name, version=version, definition=definition,
                           created_at=created)

    @guard
    async def get_agent(self, tenant: str, name: str,
                        version: int | None = None) -> AgentRecord | None:
        """See ``AgentStore.get_agent``."""
        if version is None:
            latest: Any = await self.client.hget(keys.agents_key(tenant), name)
            if latest is None:
                return None
            version = int(latest)
        if version < 1:
            return None
        raw: Any = await self.client.lindex(keys.agent_versions_key(tenant, name), version - 1)
        return None if raw is None else _record(name, version, raw)

    @guard
    async def list_agents(self, tenant: str) -> list[AgentRecord]:
        """See ``AgentStore.list_agents``."""
        index: Any = await self.client.hgetall(keys.agents_key(tenant))
        found = [await self.get_agent(tenant, name.decode(), int(version))
                 for name, version in sorted(index.items())]
        return [record for record in found if record is not None]

    @guard
    async def agent_versions(self, tenant: str, name: str) -> list[AgentRecord]:
        """See ``AgentStore.agent_versions``."""
        raw: Any = await self.client.lrange(keys.agent_versions_key(tenant, name), 0, -1)
        return [_record(name, i + 1, entry) for i, entry in enumerate(raw)]

    @guard
    async def delete_agent(self, tenant: str, name: str) -> bool:
        """See ``AgentStore.delete_agent``."""
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.agents_key(tenant), name)
            pipe.delete(keys.agent_versions_key(tenant, name))
            removed, _ = await pipe.execute()
        return bool(removed)
