"""A cheap OpenAI-compatible Chat Completions server on loopback, for benchmarks.

``python bench/fake_llm.py --port N [--delay-ms X] [--tls-cert C --tls-key K]``

Script, per request: if the last message is not a tool result, the answer is one tool call
``add({"a": 2, "b": 3})`` with its arguments split over several chunks (``finish_reason:
tool_calls``); otherwise it is 40 text deltas and ``finish_reason: stop``. ``deltas=N`` in the
first user message asks for N text deltas straight away (the live-streams workload);
``answer=N`` keeps the tool call first and makes the answer after it N text deltas
(``bench/instructions.py`` splits a run's cost into its fixed and per-frame parts with it).
Streaming requests get SSE (``data: {chunk}`` frames, a usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``); other requests get one
``chat.completion`` object. ``GET /v1/models`` lists the one model; ``GET /stats`` counts the
requests served (the harness checks calls per run with it).

Raw asyncio streams (uvloop when installed), HTTP/1.1 keep-alive, chunked responses, ``https://``
with ``--tls-cert``/``--tls-key``; with ``--delay-ms 0`` each response leaves in one write.
With a delay every frame (text delta, tool-call fragment) is its own write, ``delay`` after the
previous one, as a model streams tokens; scheduled with ``call_at`` per stream (no task per
frame) so the fake stays cheap next to the servers it feeds. Paced text deltas after the first
eight words carry their write time (``" w12@<time.monotonic() in µs>"``): clients measure the
lag from model frame written to SSE frame received with it (one clock on one machine).
``/stats`` also counts accepted connections (TLS handshakes, with TLS). The harness reports this
process's CPU per run next to the servers', so it can be seen not to be the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import signal
import ssl
import time
from typing import Any

try:
    import orjson

    def _dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    _loads = orjson.loads
except ImportError:  # the peer's venv or a bare interpreter
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads

MODEL = "fake-model"
TOOL_ARGS_PARTS = ['{"a"', ': 2, ', '"b": ', "3}"]
TEXT_DELTAS = 40
USAGE_TOOL = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
USAGE_TEXT = {"prompt_tokens": 70, "completion_tokens": TEXT_DELTAS,
              "total_tokens": 70 + TEXT_DELTAS}
_ids = itertools.count(1)


WORDS = ["The", " sum", " of", " 2", " and", " 3", " is", " 5."]
_DELTAS = re.compile(r"deltas=(\d{1,6})")
_ANSWER = re.compile(r"answer=(\d{1,6})")


def text_pieces(n: int = TEXT_DELTAS) -> list[str]:
    """The text deltas; their concatenation is the whole answer."""
    return [WORDS[i] if i < len(WORDS) else f" w{i}" for i in range(n)]


def wants_text(body: dict[str, Any]) -> bool:
    """True when the last message is a tool result or the first user message asks for
    ``deltas=N``: answer in text."""
    messages = body.get("messages") or [{}]
    return messages[-1].get("role") == "tool" or _asked_deltas(body) is not None


def _asked_deltas(body: dict[str, Any], pattern: re.Pattern[str] = _DELTAS) -> int | None:
    first = next((m for m in body.get("messages") or [] if m.get("role") == "user"), {})
    content = first.get("content")
    found = pattern.search(content) if isinstance(content, str) else None
    return int(found.group(1)) if found else None


def text_deltas(body: dict[str, Any]) -> int:
    """``deltas=N`` (or ``answer=N``) in the first user message, else ``TEXT_DELTAS``."""
    for pattern in (_DELTAS, _ANSWER):
        if (asked := _asked_deltas(body, pattern)) is not None:
            return asked
    return TEXT_DELTAS


def _chunk(cid: str, created: int, delta: dict[str, Any] | None, finish: str | None,
           usage: bool) -> dict[str, Any]:
    chunk: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                             "model": MODEL, "system_fingerprint": "fp_bench",
                             "choices": [{"index": 0, "delta": delta or {},
                                          "logprobs": None, "finish_reason": finish}]}
    if usage:
        chunk["usage"] = None
    return chunk


def stream_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunk objects of one streamed answer, usage chunk included when asked for."""
    n = next(_ids)
    cid, created = f"chatcmpl-bench{n}", int(time.time())
    opts = body.get("stream_options") or {}
    usage = bool(opts.get("include_usage"))
    out: list[dict[str, Any]] = []
    if wants_text(body):
        for i, piece in enumerate(text_pieces(text_deltas(body))):
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            out.append(_chunk(cid, created, delta, None, usage))
        out.append(_chunk(cid, created, None, "stop", usage))
        totals = USAGE_TEXT
    else:
        head = {"index": 0, "id": f"call_bench{n}", "type": "function",
                "function": {"name": "add", "arguments": ""}}
        out.append(_chunk(cid, created, {"role": "assistant", "content": None,
                                         "tool_calls": [head]}, None, usage))
        for part in TOOL_ARGS_PARTS:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
            out.append(_chunk(cid, created, delta, None, usage))
        out.append(_chunk(cid, created, None, "tool_calls", usage))
        totals = USAGE_TOOL
    if usage:
        out.append({"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": MODEL, "system_fingerprint": "fp_bench", "choices": [],
                    "usage": totals})
    return out


def completion(body: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming answer: the same script as one ``chat.completion`` object."""
    n = next(_ids)
    if wants_text(body):
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(text_pieces(text_deltas(body)))}
        finish, usage = "stop", USAGE_TEXT
    else:
        call = {"id": f"call_bench{n}", "type": "function",
                "function": {"name": "add", "arguments": "".join(TOOL_ARGS_PARTS)}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish, usage = "tool_calls", USAGE_TOOL
    return {"id": f"chatcmpl-bench{n}", "object": "chat.completion", "created": int(time.time()),
            "model": MODEL, "choices": [{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": finish}], "usage": usage}


def _frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk carrying one SSE frame."""
    data = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


_SSE_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
             b"transfer-encoding: chunked\r\n\r\n")
_LAST_CHUNK = b"0\r\n\r\n"


def _stamp(chunk: dict[str, Any]) -> bytes:
    """The chunk's JSON; a text delta past the first words gets its write time appended."""
    choices = chunk["choices"]
    content = choices[0]["delta"].get("content") if choices else None
    if content and content.startswith(" w"):
        stamped = dict(choices[0], delta={"content": f"{content}@{int(time.monotonic() * 1e6)}"})
        return _dumps(dict(chunk, choices=[stamped]))
    return _dumps(chunk)


class _Paced:
    """One paced response: writes frame ``i`` at ``start + i * delay`` from loop callbacks."""

    def __init__(self, transport: asyncio.BaseTransport, chunks: list[dict[str, Any]],
                 delay: float, done: asyncio.Future[None]) -> None:
        self.transport, self.chunks, self.delay, self.done = transport, chunks, delay, done
        self.n_deltas = sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"])
        self.i = 0
        self.loop = asyncio.get_running_loop()
        self.start = self.loop.time()
        self.tick()

    def tick(self) -> None:
        t = self.transport
        if t.is_closing():  # type: ignore[attr-defined]
            self.done.cancel()
            return
        # the pause comes between deltas; finish, usage and [DONE] follow the last one at once
        while self.i < len(self.chunks):
            t.write(_frame(_stamp(self.chunks[self.i])))  # type: ignore[attr-defined]
            self.i += 1
            if 0 < self.i < self.n_deltas:
                self.loop.call_at(self.start + self.i * self.delay, self.tick)
                return
        t.write(_frame(b"[DONE]") + _LAST_CHUNK)  # type: ignore[attr-defined]
        if not self.done.done():
            self.done.set_result(None)


class FakeLLM:
    """The server: one coroutine per connection, requests served in order (keep-alive)."""

    def __init__(self, delay_ms: float = 0.0) -> None:
        self.delay = delay_ms / 1000.0
        self.stats = {"requests": 0, "tool_call_answers": 0, "text_answers": 0, "open_streams": 0,
                      "connections": 0, "open_connections": 0}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        self.stats["open_connections"] += 1
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                asyncio.CancelledError, ssl.SSLError):
            pass
        finally:
            self.stats["open_connections"] -= 1
            writer.close()

    async def _one_request(self, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip()
                   for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        length = int(headers.get("content-length", "0"))
        body = await reader.readexactly(length) if length else b""
        keep = headers.get("connection", "").lower() != "close"
        path = path.split("?", 1)[0]
        if method == "POST" and path.endswith("/chat/completions"):
            await self._completions(_loads(body or b"{}"), writer)
        elif method == "GET" and path.endswith("/models"):
            self._reply(writer, 200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "bench"}]})
        elif method == "GET" and path == "/stats":
            self._reply(writer, 200, self.stats)
        else:
            self._reply(writer, 404, {"error": {"message": f"no route {method} {path}",
                                                "type": "invalid_request_error"}})
        await writer.drain()
        return keep

    async def _completions(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        self.stats["requests"] += 1
        self.stats["text_answers" if wants_text(body) else "tool_call_answers"] += 1
        if not body.get("stream"):
            self._reply(writer, 200, completion(body))
            return
        chunks = stream_chunks(body)
        if not self.delay:
            frames = [_frame(_dumps(c)) for c in chunks] + [_frame(b"[DONE]")]
            writer.write(_SSE_HEAD + b"".join(frames) + _LAST_CHUNK)
            return
        self.stats["open_streams"] += 1
        try:
            writer.write(_SSE_HEAD)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            _Paced(writer.transport, chunks, self.delay, done)
            await done
        finally:
            self.stats["open_streams"] -= 1

    @staticmethod
    def _reply(writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
        data = _dumps(obj)
        reason = b"OK" if status == 200 else b"Not Found"
        writer.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d"
                     b"\r\n\r\n%s" % (status, reason, len(data), data))


async def serve(host: str, port: int, delay_ms: float, tls: ssl.SSLContext | None = None
                ) -> None:
    """Serve until SIGTERM/SIGINT; prints ``listening <port>`` once bound."""
    fake = FakeLLM(delay_ms)
    server = await asyncio.start_server(fake.handle, host, port, backlog=4096,
                                        limit=1 << 20, ssl=tls)
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="pause between frames")
    p.add_argument("--tls-cert", help="serve https with this certificate chain (PEM)")
    p.add_argument("--tls-key", help="and this key (PEM)")
    args = p.parse_args(argv)
    tls = None
    if args.tls_cert:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
        tls.set_alpn_protocols(["http/1.1"])
    if not args.host.startswith("127.") and args.host not in ("localhost", "::1"):
        p.error("loopback addresses only")
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(serve(args.host, args.port, args.delay_ms, tls))


if __name__ == "__main__":
    main()
