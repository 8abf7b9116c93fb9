"""Size caps: keep the head and the tail of something too long, with a marker between.

``HeadTail`` takes a byte stream of any length in bounded memory (a command printing 100 MB
costs ``cap`` bytes); ``cap_text`` does the same to a string already in memory.
"""

from __future__ import annotations


def _marker(omitted: int, unit: str) -> str:
    return f"\n… [{omitted} {unit} omitted] …\n"


def cap_text(text: str, cap: int) -> str:
    """``text`` if it fits in ``cap`` characters, else its head and tail around a marker."""
    if len(text) <= cap:
        return text
    half = max(cap // 2, 1)
    return text[:half] + _marker(len(text) - 2 * half, "characters") + text[-half:]


class HeadTail:
    """Accumulates bytes, keeping at most ``cap`` of them: the first and the last halves."""

    def __init__(self, cap: int) -> None:
        self._half = max(cap // 2, 1)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        """Bytes fed so far."""

    def feed(self, data: bytes) -> None:
        """Add a chunk; memory stays bounded by ``cap`` plus one chunk."""
        self.total += len(data)
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > self._half:
                del self._tail[: len(self._tail) - self._half]

    def text(self) -> str:
        """What was kept, decoded (bad UTF-8 replaced), with a marker where bytes were cut."""
        omitted = self.total - len(self._head) - len(self._tail)
        head = self._head.decode("utf-8", "replace")
        if omitted <= 0:
            return head + self._tail.decode("utf-8", "replace")
        return head + _marker(omitted, "bytes") + self._tail.decode("utf-8", "replace")
