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

The relay is also the floor of the production path (``make bench``'s ``relay-floor`` system):
when the model's reply picks a tool (``finish_reason: tool_calls``), it sends the second
request itself with a canned tool result and relays that reply too, so one run costs what the
least a tool loop can do costs: two https model requests on pooled connections, ~45 model
frames relayed, ``POST /runs`` and the event stream on a new client connection. Between the
replies it sends ``tool_execution_end`` and at the end ``agent_end`` (``stop_reason: stop``),
which is what the benchmark's client checks.
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


_PICKS_TOOL = b'"finish_reason":"tool_calls"'
_TOOL_END = b'event: tool_execution_end\ndata: {"is_error":false}\n\n'
_AGENT_END = b'event: agent_end\ndata: {"stop_reason":"stop"}\n\n'


def _second_body(prompt: str) -> bytes:
    """The request after the tool ran: the pick and its result (the fake answers in text)."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
    return json.dumps({"model": "fake-model", "stream": True, "messages": [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}]}).encode()


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
        self.asked = 0

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
                client.model_event(event[6:], self)

    def send(self, path: bytes, host: str, body: bytes) -> None:
        """One request; its reply goes to ``client`` (the same for a second request)."""
        assert self.transport is not None
        self.asked += 1
        self.transport.write(b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json"
                             b"\r\ncontent-length: %d\r\n\r\n%s" % (
                                 path, host.encode(), len(body), body))

    def on_message_complete(self) -> None:
        self.asked -= 1
        self.parser = httptools.HttpResponseParser(self)
        if self.asked > 0:  # the tool loop's second request is out: its reply is next
            return
        client, self.client = self.client, None
        if client is not None:
            client.model_done()
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
        self.prompt = ""
        self.picked = False
        """The reply being relayed picks a tool: its end asks the model again."""

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

    def model_event(self, data: bytes, model: _Model) -> None:
        if self.transport is None:
            return
        if data != b"[DONE]":
            if _PICKS_TOOL in data:
                self.picked = True
            self.transport.write(_chunk(b"event: message_update\ndata: " + data + b"\n\n"))
        elif self.picked:  # the tool "ran": ask again with its result on the same connection
            self.picked = False
            self.transport.write(_chunk(_TOOL_END))
            model.send(self.relay.path, self.relay.host, _second_body(self.prompt))
        else:
            self.transport.write(_chunk(_AGENT_END) + b"0\r\n\r\n")

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
        model.client, client.model, client.prompt = client, model, prompt
        run_id = next((r for r, p in self.runs.items() if p is prompt), None)
        if run_id is not None:
            self.streams[run_id] = model
        model.send(self.path, self.host, body)


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
