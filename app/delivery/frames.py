"""SSE framing of a run's stored events, shared by the log-reading and the tapped streams
(``app.delivery.sse``, ``app.delivery.tap``) and the live feeds (``app.store.live_feed``)."""

from __future__ import annotations

import orjson

from app.store.contract import Backend
from app.store.records import TERMINAL, StoredEvent

PAGE = 200
"""Events read per backend call (bounds a subscriber's buffer)."""
PING = b": ping\n"
"""A comment line alone: bytes on an idle connection (proxies and clients see it alive)
that no parser turns into an event (no blank line follows it)."""


def frame(event: StoredEvent) -> bytes:
    """One SSE frame; the stored JSON never holds a raw newline (orjson escapes them)."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, event.type.encode(), event.data)


def ends_stream(event: StoredEvent) -> bool:
    """``agent_end`` of the run's own loop (nested loops end with depth > 0)."""
    if event.type != "agent_end":
        return False
    return int(orjson.loads(event.data).get("depth", 0)) == 0


async def run_ended(backend: Backend, run_id: str) -> bool:
    """Whether the run is gone or its status is terminal."""
    record = await backend.get_run(run_id)
    return record is None or record.status in TERMINAL


def chunk(events: list[StoredEvent]) -> tuple[bytes, int, bool]:
    """(the frames of ``events`` as one chunk, the last seq sent, whether the run's own
    ``agent_end`` was among them: nothing after it is sent)."""
    frames = []
    for event in events:
        frames.append(frame(event))
        if ends_stream(event):
            return b"".join(frames), event.seq, True
    return b"".join(frames), events[-1].seq, False
