"""``AgentStore`` of the in-process backend."""

from __future__ import annotations

import copy
from typing import Any

from app.store.errors import AgentExists
from app.store.memory.core import MemoryCore
from app.store.records import AgentRecord, now


class MemoryAgents(MemoryCore):
    """See ``app.store.contract.AgentStore``."""

    async def put_agent(self, tenant: str, name: str, definition: dict[str, Any], *,
                        create: bool) -> AgentRecord:
        """See ``AgentStore.put_agent``."""
        versions = self._agents.setdefault((tenant, name), [])
        if create and versions:
            raise AgentExists(name)
        record = AgentRecord(name=name, version=len(versions) + 1,
                             definition=copy.deepcopy(definition), created_at=now())
        versions.append(record)
        return record

    async def get_agent(self, tenant: str, name: str,
                        version: int | None = None) -> AgentRecord | None:
        """See ``AgentStore.get_agent``."""
        versions = self._agents.get((tenant, name)) or []
        if version is None:
            return versions[-1] if versions else None
        return versions[version - 1] if 1 <= version <= len(versions) else None

    async def list_agents(self, tenant: str) -> list[AgentRecord]:
        """See ``AgentStore.list_agents``."""
        return [v[-1] for (t, _), v in sorted(self._agents.items()) if t == tenant and v]

    async def agent_versions(self, tenant: str, name: str) -> list[AgentRecord]:
        """See ``AgentStore.agent_versions``."""
        return list(self._agents.get((tenant, name)) or [])

    async def delete_agent(self, tenant: str, name: str) -> bool:
        """See ``AgentStore.delete_agent``."""
        return self._agents.pop((tenant, name), None) is not None
