"""Incremental server-sent-events parsing for provider streams.

Bytes may arrive split anywhere (inside a line, inside a UTF-8 character); ``SSEDecoder`` keeps
what it has not yet seen a line end for and yields whole events only.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event: ``event`` defaults to ``message`` as in the WHATWG spec."""

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Feed bytes, get events. ``flush`` dispatches a final event not followed by a blank line."""

    __slots__ = ("_buf", "_data", "_decoder", "_event", "_id")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes) -> Iterator[SSEEvent]:
        """Decode ``chunk`` and yield every event it completes."""
        self._buf += self._decoder.decode(chunk)
        yield from self._lines(final=False)

    def flush(self) -> Iterator[SSEEvent]:
        """End of stream: yield what is left."""
        self._buf += self._decoder.decode(b"", final=True)
        yield from self._lines(final=True)
        if self._data:
            yield self._dispatch()

    def _lines(self, *, final: bool) -> Iterator[SSEEvent]:
        buf = self._buf
        start = 0
        for match in _LINE_END.finditer(buf):
            # a "\r" at the very end may be the first half of "\r\n": wait for more
            if match.group() == "\r" and match.end() == len(buf) and not final:
                break
            event = self._line(buf[start:match.start()])
            start = match.end()
            if event is not None:
                yield event
        rest = buf[start:]
        self._buf = ""
        if final and rest:
            event = self._line(rest)
            if event is not None:
                yield event
        else:
            self._buf = rest

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch() if self._data or self._event else None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        return None

    def _dispatch(self) -> SSEEvent:
        event = SSEEvent(self._event or "message", "\n".join(self._data), self._id)
        self._event = ""
        self._data = []
        return event


async def iter_sse(chunks: AsyncIterator[bytes]) -> AsyncIterator[SSEEvent]:
    """The events of a byte stream (e.g. ``httpx.Response.aiter_bytes()``)."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.flush():
        yield event
