"""Incremental server-sent-events parsing for provider streams.

Bytes may arrive split anywhere (inside a line, inside a UTF-8 character); ``SSEDecoder`` keeps
what it has not yet seen a line end for and returns whole events only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event: ``event`` defaults to ``message`` as in the WHATWG spec."""

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Feed bytes, get events. ``flush`` dispatches a final event not followed by a blank line.

    Works on bytes: lines are cut at ``\\n``, ``\\r\\n`` or ``\\r`` (a ``\\r`` at the end of
    a chunk waits for the next one), and each complete line is decoded on its own, which equals
    decoding the whole stream (a line end never falls inside a UTF-8 character). ``data:`` and
    blank lines, nearly every line of a model stream, are handled inline; the rest go through
    ``_line``.
    """

    __slots__ = ("_buf", "_data", "_event", "_id")

    def __init__(self) -> None:
        self._buf = b""
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Every event that ``chunk`` completes (a list, not a generator: nearly every chunk
        of a model stream completes exactly one event, and a generator's set-up and resumes
        cost more than the list)."""
        if (not self._buf and not self._data and not self._event
                and chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
                and chunk.count(b"\n") == 2 and b"\r" not in chunk):
            # one whole event of one data line, nothing pending: nearly every chunk of a
            # model stream, dispatched without cutting it into lines
            return [SSEEvent("message", chunk[6:-2].decode("utf-8", "replace"), self._id)]
        buf = self._buf + chunk if self._buf else chunk
        keep = b""
        if b"\r" in buf:
            if buf.endswith(b"\r"):  # maybe the first half of "\r\n": wait for more
                buf, keep = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._buf = lines.pop() + keep
        return self._lines(lines)

    def flush(self) -> list[SSEEvent]:
        """End of stream: what is left."""
        rest, self._buf = self._buf, b""
        out = self._lines(rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                          .rstrip(b"\n").split(b"\n")) if rest else []
        if self._data:
            out.append(self._dispatch())
        return out

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
                data.append(value.decode("utf-8", "replace"))
            elif not line:
                if data or self._event:
                    out.append(self._dispatch())
                    data = self._data
            else:
                event = self._line(line.decode("utf-8", "replace"))
                if event is not None:
                    out.append(event)
                    data = self._data
        return out

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
    """The events of a byte stream (``providers._http.body_chunks``)."""
    decoder = SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.flush():
        yield event
