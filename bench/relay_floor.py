"""The floor under "CPU per live frame": the least any Python server on uvloop spends to relay
one paced model frame over TLS to one SSE client, measured with the same live-streams step.

The relay (``serve``) speaks just enough of agentloop's API for ``bench/_live.py``:
``POST /runs`` answers an id, ``GET /runs/{id}/events`` streams the model's reply, ``POST
/runs/{id}/cancel`` ends it. Per model frame it does only what no server can skip: the TLS
read, the HTTP/1.1 chunked body parse (httptools, C), cutting the SSE event, and one chunked
``transport.write`` of an SSE frame to the client — no JSON, no event objects, no log, no
tasks. What agentloop spends above it is the cost of being a loop service (parse, accumulate,
encode, append, fan out); the floor itself is the event loop, the kernel and TLS::

    .venv/bin/python bench/relay_floor.py --rounds 4 --streams 100

Each round runs one live step on the relay and one on ``agentloop serve`` (memory backend),
alternating which goes first, and prints server CPU µs per delivered frame for both.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import ssl
import statistics
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httptools

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
         b"transfer-encoding: chunked\r\n\r\n")


def _reply(status: int, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status, ctype, len(body), body)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Model(asyncio.Protocol):
    """One TLS connection to the model: each SSE event of the reply goes to ``client``."""

    def __init__(self, relay: _Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.client: _Client | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        buf = self.buf + body
        *events, self.buf = buf.split(b"\n\n")
        client = self.client
        for event in events:
            if client is not None and event.startswith(b"data: "):
                client.model_event(event[6:])

    def on_message_complete(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.model_done()
        self.parser = httptools.HttpResponseParser(self)
        self.buf = b""
        self.relay.idle.append(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self in self.relay.idle:
            self.relay.idle.remove(self)


class _Client(asyncio.Protocol):
    """One client connection: the API above, one SSE stream at a time."""

    def __init__(self, relay: _Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.model: _Model | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method, path = self.parser.get_method(), self.url.split(b"?", 1)[0]
        body, self.url, self.body = b"".join(self.body), b"", []
        write = self.transport.write if self.transport else None
        if write is None:
            return
        parts = path.strip(b"/").split(b"/")
        if method == b"GET" and path == b"/healthz":
            write(_reply(200, b'{"status":"ok"}'))
        elif method == b"POST" and path == b"/runs":
            run_id = f"r{next(self.relay.ids)}"
            self.relay.runs[run_id] = json.loads(body or b"{}").get("input", "")
            write(_reply(201, json.dumps({"id": run_id, "status": "queued",
                                          "events_url": f"/runs/{run_id}/events"}).encode()))
        elif method == b"GET" and len(parts) == 3 and parts[2] == b"events":
            prompt = self.relay.runs.get(parts[1].decode())
            if prompt is None:
                write(_reply(404, b"{}"))
                return
            write(_HEAD)
            task = asyncio.ensure_future(self.relay.ask(self, prompt))
            self.relay.asking.add(task)
            task.add_done_callback(self.relay.asking.discard)
        elif method == b"POST" and len(parts) == 3 and parts[2] == b"cancel":
            model = self.relay.streams.pop(parts[1].decode(), None)
            if model is not None and model.transport is not None:
                model.transport.close()
            write(_reply(202, b"{}"))
        else:
            write(_reply(404, b"{}"))

    def model_event(self, data: bytes) -> None:
        if self.transport is None:
            return
        if data == b"[DONE]":
            self.transport.write(_chunk(b"event: agent_end\ndata: {}\n\n") + b"0\r\n\r\n")
        else:
            self.transport.write(_chunk(b"event: message_update\ndata: " + data + b"\n\n"))

    def model_done(self) -> None:
        self.model = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.model is not None and self.model.transport is not None:
            self.model.client = None
            self.model.transport.close()


class _Relay:
    def __init__(self, model_url: str) -> None:
        parts = urlsplit(model_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 443
        self.path = (parts.path.rstrip("/") + "/chat/completions").encode()
        self.tls = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))
        self.ids = itertools.count(1)
        self.runs: dict[str, str] = {}
        self.streams: dict[str, _Model] = {}
        self.idle: list[_Model] = []
        self.asking: set[asyncio.Future[None]] = set()

    async def ask(self, client: _Client, prompt: str) -> None:
        loop = asyncio.get_running_loop()
        model = None
        while self.idle and model is None:
            candidate = self.idle.pop()
            if candidate.transport is not None and not candidate.transport.is_closing():
                model = candidate
        if model is None:
            _, model = await loop.create_connection(lambda: _Model(self), self.host, self.port,
                                                    ssl=self.tls, server_hostname=self.host)
        body = json.dumps({"model": "fake-model", "stream": True,
                           "messages": [{"role": "user", "content": prompt}]}).encode()
        model.client, client.model = client, model
        run_id = next((r for r, p in self.runs.items() if p is prompt), None)
        if run_id is not None:
            self.streams[run_id] = model
        assert model.transport is not None
        model.transport.write(b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json"
                              b"\r\ncontent-length: %d\r\n\r\n%s" % (
                                  self.path, self.host.encode(), len(body), body))


async def _serve(port: int, model_url: str) -> None:
    relay = _Relay(model_url)
    server = await asyncio.get_running_loop().create_server(lambda: _Client(relay),
                                                            "127.0.0.1", port, backlog=2048)
    async with server:
        await server.serve_forever()


def start_relay(fake: Any) -> Any:
    """The relay as a process (a ``bench._procs.Proc``) against the https fake model."""
    from bench._procs import free_port, start, wait_http

    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "SSL_CERT_FILE": str(fake.ca)}
    server = start("relay_floor", [sys.executable, __file__, "serve", "--port", str(port),
                                   "--model", fake.url + "/v1"], port, env=env)
    try:
        wait_http(server, "/healthz", 30)
    except Exception:
        server.stop()
        raise
    return server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("serve", help="run the relay (used by the measurement)")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--model", required=True, help="the model's base URL (…/v1)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--streams", type=int, default=100)
    args = p.parse_args(argv)
    if args.cmd == "serve":
        import uvloop

        uvloop.run(_serve(args.port, args.model))
        return
    from bench import _live, _systems
    from bench._procs import OUT, start_fake
    from bench._tls import make_tls

    fake = start_fake(_live.FRAME_MS, tls=make_tls(OUT / "tls"), name="fake_llm_floor")
    try:
        rows = _live.interleaved(
            {"relay": lambda: start_relay(fake),
             "agentloop": lambda: _systems.start_agentloop(
                 fake, redis=False, name="floor-agentloop",
                 extra_env={"AGENTLOOP_WORKER_CONCURRENCY": "5000"})},
            args.rounds, args.streams,
            ("server_us_per_frame", "frames_per_s", "live", "lag_ms", "server_cpu_util",
             "load_avg"))
        for row in rows:
            print(json.dumps(row), flush=True)
    finally:
        fake.stop()
    out: dict[str, Any] = {"streams": args.streams, "rounds": len(rows)}
    for kind in ("relay", "agentloop"):
        out[kind + "_us_per_frame_median"] = statistics.median(
            r[kind]["server_us_per_frame"] for r in rows)
    out["ratio_median"] = round(statistics.median(
        r["agentloop"]["server_us_per_frame"] / r["relay"]["server_us_per_frame"]
        for r in rows), 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
