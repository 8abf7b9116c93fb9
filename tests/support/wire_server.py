"""A scripted HTTP/1.1 server on loopback, for testing provider adapters at the wire.

Each request is recorded (method, path, query, headers, body, parsed JSON) and answered with the
next scripted ``Reply``: a status, headers and body chunks sent one by one with chunked transfer
encoding, so tests control exactly where the stream is split. Use it as an async context manager::

    async with WireServer() as server:
        server.replies.append(Reply(200, chunks=[b"data: ...\\n\\n"]))
        ... point the adapter at server.url ...
        assert server.requests[0].json["model"] == "x"
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Reply:
    status: int = 200
    chunks: list[bytes] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"
    delay: float = 0.0
    """Seconds to wait between chunks."""
    drop_after: int | None = None
    """Close the connection abruptly after this many chunks (a stream broken midway)."""
    chunked: bool = True
    """False: send ``content-length`` and the body whole."""
    close: bool = False
    """Close the connection after this reply (the server does not keep it alive)."""
    end_delay: float = 0.0
    """Seconds to wait after the last chunk before ending the chunked body (``0\r\n\r\n``):
    a reader that stops at its protocol's end marker has not seen the HTTP message end."""


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class WireServer:
    """``tls``: serve ``https://`` with this server context (``bench._tls`` makes one);
    ``default``: the answer once the scripted ``replies`` run out (else a 500)."""

    def __init__(self, tls: ssl.SSLContext | None = None, *,
                 default: Reply | None = None) -> None:
        self.tls = tls
        self.default = default
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self.connections = 0

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    async def __aenter__(self) -> WireServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                parts = urlsplit(target)
                self.requests.append(Recorded(method, parts.path, parse_qs(parts.query),
                                              headers, body))
                reply = self.replies.pop(0) if self.replies else self.default or Reply(
                    500, [b'{"error":{"message":"no scripted reply"}}'],
                    content_type="application/json")
                if not await self._send(writer, reply) or reply.close:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, reply: Reply) -> bool:
        if not reply.chunked:
            body = b"".join(reply.chunks)
            head = [f"HTTP/1.1 {reply.status} X", f"content-type: {reply.content_type}",
                    f"content-length: {len(body)}"]
            head += [f"{k}: {v}" for k, v in reply.headers.items()]
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            await writer.drain()
            return True
        head = [f"HTTP/1.1 {reply.status} X", f"content-type: {reply.content_type}",
                "transfer-encoding: chunked"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await writer.drain()
        for i, chunk in enumerate(reply.chunks):
            if reply.drop_after is not None and i >= reply.drop_after:
                writer.transport.abort()
                return False
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if chunk:
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await writer.drain()
        if reply.drop_after is not None and reply.drop_after <= len(reply.chunks):
            writer.transport.abort()
            return False
        if reply.end_delay:
            await asyncio.sleep(reply.end_delay)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def split_at(data: bytes, *offsets: int) -> list[bytes]:
    """``data`` cut at the given byte offsets (for replaying a stream split anywhere)."""
    out, last = [], 0
    for off in sorted(set(o for o in offsets if 0 < o < len(data))):
        out.append(data[last:off])
        last = off
    out.append(data[last:])
    return out
