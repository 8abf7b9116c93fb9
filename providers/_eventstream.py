"""Frames of an ``application/vnd.amazon.eventstream`` body, decoded by botocore.

Each frame is: prelude (total length, headers length, prelude CRC32), typed headers, payload,
message CRC32. botocore's ``EventStreamBuffer`` checks both CRCs and the lengths; any failure
becomes ``EventStreamCorrupt``. botocore is imported on first use (the optional ``bedrock``
extra).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast


@dataclass(slots=True, frozen=True)
class Frame:
    """One decoded message: its headers (``:message-type``, ``:event-type`` …) and payload."""

    headers: dict[str, Any]
    payload: bytes


class EventStreamCorrupt(Exception):
    """A frame failed its prelude or message CRC, or declared impossible lengths."""


class EventStreamTruncated(Exception):
    """The body ended inside a frame (the connection was cut)."""


async def iter_frames(chunks: AsyncIterator[bytes]) -> AsyncIterator[Frame]:
    """The frames of a byte stream split anywhere, each yielded as soon as it is whole.

    Raises ``EventStreamCorrupt`` at the first bad frame (after yielding the good ones before
    it) and ``EventStreamTruncated`` when bytes of an unfinished frame are left at the end.
    """
    from botocore.eventstream import EventStreamBuffer, ParserError

    buffer = EventStreamBuffer()
    pending = 0
    async for chunk in chunks:
        buffer.add_data(chunk)
        pending += len(chunk)
        while True:
            try:
                message = next(buffer)
            except StopIteration:
                break
            except ParserError as exc:
                raise EventStreamCorrupt(f"{type(exc).__name__}: {exc}") from exc
            prelude: Any = message.prelude  # a MessagePrelude; botocore-stubs says int
            pending -= prelude.total_length
            yield Frame(cast(dict[str, Any], message.headers), message.payload)
    if pending:
        raise EventStreamTruncated(f"the stream ended inside a frame ({pending} bytes left)")
