"""Provider adapter tests at the wire, plus the few helpers they share.

``collect`` runs one request through an adapter and accumulates the reply; ``split_patterns``
gives the byte offsets each recorded stream is replayed at (every UTF-8 continuation byte,
frame edges, and seeded random cuts).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx

from providers._transport import LeanHTTP1Transport
from providers.accumulate import Accumulator
from providers.base import ModelRequest, Provider
from providers.events import ProviderEvent
from providers.messages import dump_message

FIXTURES = Path(__file__).parent / "fixtures"


def make_client(transport: str) -> httpx.AsyncClient:
    """An httpx client over its default transport (``httpcore``) or the ``lean`` one."""
    if transport == "lean":
        return httpx.AsyncClient(transport=LeanHTTP1Transport())
    return httpx.AsyncClient()


def fixture(name: str) -> bytes:
    """A recorded stream under ``fixtures/``."""
    return (FIXTURES / name).read_bytes()


async def collect(provider: Provider, request: ModelRequest
                  ) -> tuple[list[ProviderEvent], dict[str, Any]]:
    """All events of one stream and the accumulated message (timestamp removed)."""
    acc = Accumulator(provider.name, request.model)
    events: list[ProviderEvent] = []
    async for event in provider.stream(request):
        events.append(event)
        acc.apply(event)
    assert acc.finished, "stream ended without done/error"
    assert events[0].type == "start"
    assert sum(e.type in ("done", "error") for e in events) == 1
    assert events[-1].type in ("done", "error")
    message = dump_message(acc.message)
    message.pop("timestamp")
    return events, message


def split_patterns(data: bytes, *, count: int = 24, seed: int = 7) -> list[list[int]]:
    """Offset lists to cut ``data`` at: each inside a multi-byte character, then random sets."""
    rng = random.Random(seed)
    inside_chars = [i for i, b in enumerate(data) if 0x80 <= b < 0xC0]
    patterns = [[i] for i in inside_chars[:count]]
    patterns.append(inside_chars)
    patterns.append(list(range(1, len(data))))  # one byte at a time
    for _ in range(count):
        patterns.append(rng.sample(range(1, len(data)), k=min(len(data) - 1, rng.randint(1, 12))))
    return patterns
