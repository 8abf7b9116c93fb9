"""Adapter overhead per streamed chunk, per provider protocol.

Run: ``.venv/bin/python bench/providers.py`` — prints one JSON line.

Each adapter streams a recorded reply of ``TEXT_DELTAS`` text deltas plus one tool call (its
arguments in ``len(ARGS)`` fragments) from an in-process ``httpx.MockTransport`` that hands the
body over one wire chunk (SSE event or event-stream frame) at a time, so no network cost is in the
figure. Wall time of a full stream (request build, SSE/frame decoding, event mapping; no
accumulation) divided by its chunk count, median over ``REPS`` runs after a warm-up.
Protocols whose adapter module does not import are reported under ``skipped``.
"""

from __future__ import annotations

import asyncio
import binascii
import importlib
import json
import statistics
import struct
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from providers.base import ModelRequest, Provider, ToolSpec
from providers.messages import UserMessage

TEXT_DELTAS = 200
REPS = 25
WORDS = [f"wörd{i} " for i in range(TEXT_DELTAS)]
ARGS = ['{"city": ', '"Mün', 'chen", ', '"days', '": ', "3", "}"]
TOOL = ToolSpec("get_weather", "Weather.", {"type": "object", "properties": {}})


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def openai_chat() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({"id": "c", "object": "chat.completion.chunk", "model": "gpt-4.1",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": w}) for w in WORDS]
    out.append(chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": ""}}]}))
    out += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in ARGS]
    out.append(chunk({}, "tool_calls"))
    out.append(sse({"id": "c", "choices": [], "usage": {"prompt_tokens": 9,
                                                        "completion_tokens": 9}}))
    return [*out, b"data: [DONE]\n\n"]


def openai_responses() -> list[bytes]:
    def ev(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, **fields}, kind)
    out = [ev("response.created", response={"model": "gpt-4.1"}),
           ev("response.output_item.added", output_index=0,
              item={"type": "message", "id": "msg_1", "content": []})]
    out += [ev("response.output_text.delta", output_index=0, delta=w) for w in WORDS]
    out.append(ev("response.output_item.done", output_index=0,
                  item={"type": "message", "id": "msg_1", "content": []}))
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather"}
    out.append(ev("response.output_item.added", output_index=1, item=call))
    out += [ev("response.function_call_arguments.delta", output_index=1, delta=a) for a in ARGS]
    out.append(ev("response.output_item.done", output_index=1,
                  item={**call, "arguments": "".join(ARGS)}))
    out.append(ev("response.completed", response={"usage": {"input_tokens": 9,
                                                             "output_tokens": 9}}))
    return out


def anthropic() -> list[bytes]:
    def ev(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, **fields}, kind)
    out = [ev("message_start", message={"id": "m", "model": "claude", "role": "assistant",
                                        "content": [], "usage": {"input_tokens": 9}}),
           ev("content_block_start", index=0, content_block={"type": "text", "text": ""})]
    out += [ev("content_block_delta", index=0, delta={"type": "text_delta", "text": w})
            for w in WORDS]
    out += [ev("content_block_stop", index=0),
            ev("content_block_start", index=1, content_block={
                "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}})]
    out += [ev("content_block_delta", index=1,
               delta={"type": "input_json_delta", "partial_json": a}) for a in ARGS]
    return [*out, ev("content_block_stop", index=1),
            ev("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
            ev("message_stop")]


def gemini() -> list[bytes]:
    def chunk(parts: list[dict[str, Any]], **extra: Any) -> bytes:
        cand = {"content": {"role": "model", "parts": parts}, "index": 0, **extra}
        return sse({"candidates": [cand], "modelVersion": "gemini-2.5-flash"})
    out = [chunk([{"text": w}]) for w in WORDS]
    call = {"functionCall": {"name": "get_weather", "args": {"city": "München", "days": 3}}}
    out.append(sse({"candidates": [{"content": {"role": "model", "parts": [call]},
                                    "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 9}}))
    return out


def frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """One ``application/vnd.amazon.eventstream`` event frame (string headers, CRC32s)."""
    headers = b""
    for name, value in ((":event-type", event_type), (":content-type", "application/json"),
                        (":message-type", "event")):
        raw = value.encode()
        headers += bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(raw)) + raw
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 16 + len(headers) + len(body), len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + headers + body
    return message + struct.pack(">I", binascii.crc32(message))


def bedrock() -> list[bytes]:
    out = [frame("messageStart", {"role": "assistant"})]
    out += [frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w}})
            for w in WORDS]
    out += [frame("contentBlockStop", {"contentBlockIndex": 0}),
            frame("contentBlockStart", {"contentBlockIndex": 1, "start": {
                "toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}})]
    out += [frame("contentBlockDelta", {"contentBlockIndex": 1,
                                        "delta": {"toolUse": {"input": a}}}) for a in ARGS]
    return [*out, frame("contentBlockStop", {"contentBlockIndex": 1}),
            frame("messageStop", {"stopReason": "tool_use"}),
            frame("metadata", {"usage": {"inputTokens": 9, "outputTokens": 9},
                               "metrics": {"latencyMs": 1}})]


def build(name: str, client: httpx.AsyncClient) -> Provider:
    """The adapter for ``name`` pointed at the mock transport (ImportError when absent)."""
    key, base = "bench-key", "http://bench.invalid"
    module = importlib.import_module(MODULES[name])
    provider: Provider
    if name == "openai":
        provider = module.OpenAIChatProvider(client=client, base_url=base, api_key=key)
    elif name == "openai-responses":
        provider = module.OpenAIResponsesProvider(client=client, base_url=base, api_key=key)
    elif name == "anthropic":
        provider = module.AnthropicProvider(client=client, base_url=base, api_key=key)
    elif name == "gemini":
        provider = module.GeminiProvider(client=client, base_url=base, api_key=key)
    else:
        env = {"AWS_ACCESS_KEY_ID": "AKIDBENCH", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": base}
        provider = module.BedrockProvider.from_env(client=client, env=env)
    return provider


MODULES = {"openai": "providers.openai", "openai-responses": "providers.openai_responses",
           "anthropic": "providers.anthropic", "gemini": "providers.gemini",
           "bedrock": "providers.bedrock"}
STREAMS: dict[str, tuple[Callable[[], list[bytes]], str]] = {
    "openai": (openai_chat, "text/event-stream"),
    "openai-responses": (openai_responses, "text/event-stream"),
    "anthropic": (anthropic, "text/event-stream"),
    "gemini": (gemini, "text/event-stream"),
    "bedrock": (bedrock, "application/vnd.amazon.eventstream"),
}


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


async def measure(name: str) -> tuple[float, int, str]:
    """(median µs per chunk, chunk count, stop reason of the last run)."""
    make, content_type = STREAMS[name]
    chunks = make()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, stream=_Chunks(chunks))

    request = ModelRequest(model="bench-model", messages=[UserMessage(content="hi")],
                           tools=[TOOL])
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        provider = build(name, client)
        samples, last = [], None
        for rep in range(REPS + 3):
            start = time.perf_counter()
            async for event in provider.stream(request):
                last = event
            if rep >= 3:  # warm-up runs are not counted
                samples.append((time.perf_counter() - start) / len(chunks) * 1e6)
    stop = getattr(last, "stop_reason", "?")
    if getattr(last, "type", "") == "error":
        stop = f"error: {last.error_message}"  # type: ignore[union-attr]
    return statistics.median(samples), len(chunks), stop


async def main() -> None:
    figures: dict[str, float] = {}
    chunks: dict[str, int] = {}
    stops: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in STREAMS:
        try:
            figures[name], chunks[name], stops[name] = await measure(name)
        except ImportError as exc:
            skipped[name] = f"adapter not importable: {exc}"
    print(json.dumps({"bench": "provider_adapter_overhead", "unit": "us_per_chunk",
                      "median_us_per_chunk": {k: round(v, 2) for k, v in figures.items()},
                      "chunks": chunks, "stop_reason": stops, "reps": REPS,
                      "python": sys.version.split()[0], "skipped": skipped}))


if __name__ == "__main__":
    asyncio.run(main())
