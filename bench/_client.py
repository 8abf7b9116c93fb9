"""A lean HTTP/1.1 client for the load: keep-alive connections, incremental SSE.

No framework: requests are written by hand, responses read with ``Content-Length`` or chunked
framing, and an event stream is cut into SSE events as bytes arrive, each stamped with
``time.monotonic()`` (the clock the fake model stamps frames with) on arrival. Event data is
left as bytes; callers parse only what they need, so the client stays cheap next to the servers
it measures (its CPU is reported). ``stamps`` reads the fake model's write times out of an
event's data (``lag`` = arrival − write).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")
_STAMP = re.compile(rb" w\d+@(\d+)")


def stamps(data: bytes) -> list[float]:
    """The fake model's write times (``time.monotonic`` seconds) of the text deltas in ``data``."""
    return [int(m) / 1e6 for m in _STAMP.findall(data)]


@dataclass(slots=True)
class SSEEvent:
    """One server-sent event: its type (``message`` when unnamed), raw data and arrival time."""

    type: str
    data: bytes
    at: float

    def json(self) -> Any:
        return orjson.loads(self.data)


def _parse_event(block: bytes, at: float) -> SSEEvent | None:
    etype, data = "message", []
    for line in _LINE.split(block):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"event":
            etype = value.decode()
        elif name == b"data":
            data.append(value)
    if not data and etype == "message":
        return None  # a comment-only block (heartbeat)
    return SSEEvent(etype, b"\n".join(data), at)


class HTTPError(Exception):
    """A non-2xx status or a broken response."""


class Connection:
    """One HTTP/1.1 keep-alive connection to a loopback server; requests go one at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._r: asyncio.StreamReader | None = None
        self._w: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._r is None or self._w is None or self._w.is_closing():
            self._r, self._w = await asyncio.open_connection(self.host, self.port,
                                                             limit=1 << 22)
        return self._r, self._w

    def close(self) -> None:
        if self._w is not None:
            self._w.close()
        self._r = self._w = None

    async def _send(self, method: str, path: str, body: bytes | None,
                    headers: dict[str, str] | None) -> tuple[int, dict[str, str]]:
        reader, writer = await self._open()
        lines = [f"{method} {path} HTTP/1.1", f"host: {self.host}:{self.port}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body is not None:
            lines += ["content-type: application/json", f"content-length: {len(body)}"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *rest = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        hdrs = {k.strip().lower(): v.strip()
                for k, _, v in (ln.partition(":") for ln in rest if ln)}
        return status, hdrs

    async def _body(self, hdrs: dict[str, str]) -> AsyncIterator[bytes]:
        reader = self._r
        assert reader is not None
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers expected
                    break
                data = await reader.readexactly(size + 2)
                yield data[:-2]
        elif "content-length" in hdrs:
            yield await reader.readexactly(int(hdrs["content-length"]))
        else:
            while chunk := await reader.read(65536):
                yield chunk
            self.close()
        if hdrs.get("connection", "").lower() == "close":
            self.close()

    async def request(self, method: str, path: str, json: Any = None,
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """A whole response: status and body."""
        body = orjson.dumps(json) if json is not None else None
        try:
            status, hdrs = await self._send(method, path, body, headers)
            data = b"".join([chunk async for chunk in self._body(hdrs)])
        except BaseException:
            self.close()
            raise
        return status, data

    async def raw_events(self, path: str) -> AsyncIterator[tuple[bytes, float]]:
        """``GET path``'s body as it arrives, undecoded (chunk-size lines left in: each chunk
        holds whole SSE frames), with arrival times; for readers that scan bytes only. The
        first item is ``b""`` at the headers' arrival."""
        status, _ = await self._send("GET", path, None, {"accept": "text/event-stream"})
        if status >= 300:
            raise HTTPError(f"GET {path}: {status}")
        yield b"", time.monotonic()
        reader = self._r
        assert reader is not None
        while data := await reader.read(1 << 16):
            yield data, time.monotonic()
            if data.endswith(b"0\r\n\r\n"):
                break
        self.close()

    async def events(self, method: str, path: str, json: Any = None,
                     headers: dict[str, str] | None = None) -> AsyncIterator[SSEEvent]:
        """The response's SSE events as they arrive; ends when the server ends the body."""
        body = orjson.dumps(json) if json is not None else None
        hdrs = {"accept": "text/event-stream"} | (headers or {})
        done = False
        try:
            status, rh = await self._send(method, path, body, hdrs)
            if status >= 300:
                data = b"".join([c async for c in self._body(rh)])
                raise HTTPError(f"{method} {path}: {status} {data[:300]!r}")
            buf = b""
            async for chunk in self._body(rh):
                at = time.monotonic()
                buf += chunk
                while m := _EVENT_END.search(buf):
                    block, buf = buf[:m.start()], buf[m.end():]
                    if event := _parse_event(block, at):
                        yield event
            done = True
        finally:
            if not done:  # abandoned midway: the connection is not reusable
                self.close()
