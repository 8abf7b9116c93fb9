"""SSE framing of a run's stored events, shared by the log-reading and the tapped streams
(``app.delivery.sse``, ``app.delivery.tap``) and the live feeds (``app.store.live_feed``)."""

from __future__ import annotations

from app.store.live_feed import ends_stream, frame
from app.store.records import StoredEvent

PING = b": ping\n"
"""A comment line alone: bytes on an idle connection (proxies and clients see it alive)
that no parser turns into an event (no blank line follows it)."""


def chunk(events: list[StoredEvent]) -> tuple[bytes, int, bool]:
    """(the frames of ``events`` as one chunk, the last seq sent, whether the run's own
    ``agent_end`` was among them: nothing after it is sent)."""
    frames = []
    for event in events:
        frames.append(frame(event))
        if ends_stream(event):
            return b"".join(frames), event.seq, True
    return b"".join(frames), events[-1].seq, False
