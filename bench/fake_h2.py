"""The fake model's Chat Completions stream over HTTP/2 (TLS, ALPN ``h2``), for the transport
comparison in ``bench/transports.py``: ``python bench/fake_h2.py --port N --tls-cert C
--tls-key K [--delay-ms X]``. Same script as ``bench/fake_llm.py`` (its ``stream_chunks``), one
DATA frame per SSE frame, ``delay`` apart; prints ``listening <port>`` once bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_llm import stream_chunks


class H2Server(asyncio.Protocol):
    """One connection: requests collected per stream, answered when their body ends."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.bodies: dict[int, bytearray] = {}
        self.transport: asyncio.Transport | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.conn.initiate_connection()
        self._flush()

    def data_received(self, data: bytes) -> None:
        for event in self.conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                self.bodies[event.stream_id] = bytearray()
            elif isinstance(event, h2.events.DataReceived):
                self.bodies[event.stream_id] += event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                    event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                body = json.loads(bytes(self.bodies.pop(event.stream_id)) or b"{}")
                task = asyncio.ensure_future(self._answer(event.stream_id, body))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        self._flush()

    async def _answer(self, stream_id: int, body: dict[str, Any]) -> None:
        frames = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in stream_chunks(body)]
        frames.append(b"data: [DONE]\n\n")
        self.conn.send_headers(stream_id, [(":status", "200"),
                                           ("content-type", "text/event-stream")])
        for i, frame in enumerate(frames):
            if i and self.delay:
                await asyncio.sleep(self.delay)
            self.conn.send_data(stream_id, frame, end_stream=i == len(frames) - 1)
            self._flush()

    def _flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(self.conn.data_to_send())


async def serve(port: int, tls: ssl.SSLContext, delay: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: H2Server(delay), "127.0.0.1", port, ssl=tls,
                                      backlog=1024)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tls-cert", required=True)
    p.add_argument("--tls-key", required=True)
    p.add_argument("--delay-ms", type=float, default=0.0)
    args = p.parse_args()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(args.tls_cert, args.tls_key)
    tls.set_alpn_protocols(["h2"])
    import uvloop

    uvloop.run(serve(args.port, tls, args.delay_ms / 1000))


if __name__ == "__main__":
    main()
