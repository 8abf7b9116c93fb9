"""Servers that reuse tool-call ids, through each real adapter and the loop, at the wire.

Every protocol plays the same three replies: two calls under one id, then a third call under
that id again, then text. The third request on the wire must carry each call exactly once
with exactly one result, under distinct ids, and the results in order (3, 7, 11).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from app import runtime
from providers._http import RetryPolicy
from providers.anthropic import AnthropicProvider
from providers.base import Provider
from providers.bedrock import BedrockProvider
from providers.gemini import GeminiProvider
from providers.messages import AssistantMessage
from providers.openai import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider
from tests.providers.test_bedrock import EVENTSTREAM, encode_item
from tests.support.wire_server import Reply, WireServer
from tool_registry import function

FAST = RetryPolicy(attempts=1)
ARGS = [(1, 2), (3, 4), (5, 6)]


@function(register=False)
def plus(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def sse(*items: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(i).encode() + b"\n\n" for i in items)


def args(n: int) -> str:
    return json.dumps({"a": ARGS[n][0], "b": ARGS[n][1]})


# -- one builder per protocol: (the reply with calls [(id, arg index)], a text reply) -----------

def chat_calls(calls: list[tuple[str, int]]) -> bytes:
    deltas = [{"index": i, "id": cid, "type": "function",
               "function": {"name": "plus", "arguments": args(n)}}
              for i, (cid, n) in enumerate(calls)]
    return sse({"model": "m", "choices": [{"index": 0, "delta": {"tool_calls": deltas}}]},
               {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
               ) + b"data: [DONE]\n\n"


def chat_text() -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "stop"}]}
               ) + b"data: [DONE]\n\n"


def responses_calls(calls: list[tuple[str, int]]) -> bytes:
    items = []
    for i, (cid, n) in enumerate(calls):
        item = {"type": "function_call", "id": f"fc_{i}", "call_id": cid, "name": "plus",
                "arguments": args(n)}
        items += [{"type": "response.output_item.added", "output_index": i,
                   "item": {**item, "arguments": ""}},
                  {"type": "response.function_call_arguments.delta", "output_index": i,
                   "delta": args(n)},
                  {"type": "response.output_item.done", "output_index": i, "item": item}]
    return sse(*items, {"type": "response.completed", "response": {"model": "m"}})


def responses_text() -> bytes:
    return sse({"type": "response.output_text.delta", "output_index": 0, "delta": "done"},
               {"type": "response.completed", "response": {"model": "m"}})


def anthropic_calls(calls: list[tuple[str, int]]) -> bytes:
    items: list[dict[str, Any]] = [{"type": "message_start", "message": {"model": "c"}}]
    for i, (cid, n) in enumerate(calls):
        items += [{"type": "content_block_start", "index": i,
                   "content_block": {"type": "tool_use", "id": cid, "name": "plus", "input": {}}},
                  {"type": "content_block_delta", "index": i,
                   "delta": {"type": "input_json_delta", "partial_json": args(n)}},
                  {"type": "content_block_stop", "index": i}]
    return sse(*items, {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
               {"type": "message_stop"})


def anthropic_text() -> bytes:
    return sse({"type": "message_start", "message": {"model": "c"}},
               {"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": "done"}},
               {"type": "content_block_stop", "index": 0}, {"type": "message_stop"})


def gemini_calls(calls: list[tuple[str, int]]) -> bytes:
    parts = [{"functionCall": {"id": cid, "name": "plus", "args": json.loads(args(n))}}
             for cid, n in calls]
    return sse({"candidates": [{"content": {"role": "model", "parts": parts},
                                "finishReason": "STOP"}], "responseId": "r"})


def gemini_text() -> bytes:
    return sse({"candidates": [{"content": {"role": "model", "parts": [{"text": "done"}]},
                                "finishReason": "STOP"}]})


def bedrock_calls(calls: list[tuple[str, int]]) -> bytes:
    items: list[dict[str, Any]] = [{"event": "messageStart", "payload": {"role": "assistant"}}]
    for i, (cid, n) in enumerate(calls):
        items += [{"event": "contentBlockStart", "payload": {
                      "contentBlockIndex": i,
                      "start": {"toolUse": {"toolUseId": cid, "name": "plus"}}}},
                  {"event": "contentBlockDelta", "payload": {
                      "contentBlockIndex": i, "delta": {"toolUse": {"input": args(n)}}}},
                  {"event": "contentBlockStop", "payload": {"contentBlockIndex": i}}]
    items.append({"event": "messageStop", "payload": {"stopReason": "tool_use"}})
    return b"".join(encode_item(i) for i in items)


def bedrock_text() -> bytes:
    items = [{"event": "messageStart", "payload": {"role": "assistant"}},
             {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0,
                                                        "delta": {"text": "done"}}},
             {"event": "contentBlockStop", "payload": {"contentBlockIndex": 0}},
             {"event": "messageStop", "payload": {"stopReason": "end_turn"}}]
    return b"".join(encode_item(i) for i in items)


# -- what the third request sent: (call ids, result ids, result texts) -------------------------

Sent = tuple[list[str], list[str], list[str]]


def chat_sent(body: dict[str, Any]) -> Sent:
    msgs = body["messages"]
    calls = [c["id"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [m for m in msgs if m["role"] == "tool"]
    return calls, [r["tool_call_id"] for r in results], [r["content"] for r in results]


def responses_sent(body: dict[str, Any]) -> Sent:
    items = body["input"]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    results = [i for i in items if i.get("type") == "function_call_output"]
    return calls, [r["call_id"] for r in results], [r["output"] for r in results]


def anthropic_sent(body: dict[str, Any]) -> Sent:
    blocks = [b for m in body["messages"] for b in m["content"]]
    calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
    results = [b for b in blocks if b["type"] == "tool_result"]
    return (calls, [r["tool_use_id"] for r in results],
            [r["content"][0]["text"] for r in results])


def bedrock_sent(body: dict[str, Any]) -> Sent:
    blocks = [b for m in body["messages"] for b in m["content"]]
    calls = [b["toolUse"]["toolUseId"] for b in blocks if "toolUse" in b]
    results = [b["toolResult"] for b in blocks if "toolResult" in b]
    return (calls, [r["toolUseId"] for r in results],
            [r["content"][0]["text"] for r in results])


def gemini_sent(body: dict[str, Any]) -> Sent:
    """Gemini pairs calls and responses by order within each turn (no ids are sent)."""
    calls: list[str] = []
    results: list[str] = []
    texts: list[str] = []
    for turn in body["contents"]:
        for part in (p for p in turn["parts"] if "functionCall" in p):
            calls.append(f"{len(calls)}:{part['functionCall']['name']}")
        answers = [p["functionResponse"] for p in turn["parts"] if "functionResponse" in p]
        start = len(results)
        results += [f"{start + i}:{a['name']}" for i, a in enumerate(answers)]
        texts += [a["response"]["output"] for a in answers]
    return calls, results, texts


@dataclass
class Protocol:
    make: Callable[[httpx.AsyncClient, str], Provider]
    calls: Callable[[list[tuple[str, int]]], bytes]
    text: Callable[[], bytes]
    sent: Callable[[dict[str, Any]], Sent]
    model: str
    content_type: str = "text/event-stream"


def _bedrock(client: httpx.AsyncClient, url: str) -> Provider:
    env = {"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url, "AWS_REGION": "us-west-2",
           "AWS_BEARER_TOKEN_BEDROCK": "k"}
    provider: Provider = BedrockProvider.from_env(client=client, env=env, retry=FAST)
    return provider


PROTOCOLS = {
    "openai": Protocol(lambda c, u: OpenAIChatProvider(client=c, base_url=u, api_key="k",
                                                       retry=FAST),
                       chat_calls, chat_text, chat_sent, "openai:m"),
    "openai-responses": Protocol(
        lambda c, u: OpenAIResponsesProvider(client=c, base_url=u, api_key="k", retry=FAST),
        responses_calls, responses_text, responses_sent, "openai-responses:m"),
    "anthropic": Protocol(lambda c, u: AnthropicProvider(client=c, base_url=u, api_key="k",
                                                         retry=FAST),
                          anthropic_calls, anthropic_text, anthropic_sent, "anthropic:c"),
    "gemini": Protocol(lambda c, u: GeminiProvider(client=c, base_url=u, api_key="k", retry=FAST),
                       gemini_calls, gemini_text, gemini_sent, "gemini:g"),
    "bedrock": Protocol(_bedrock, bedrock_calls, bedrock_text, bedrock_sent, "bedrock:b",
                        EVENTSTREAM),
}


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
async def test_every_call_has_exactly_one_result_in_the_next_request(
        server: WireServer, name: str) -> None:
    proto = PROTOCOLS[name]
    for body in (proto.calls([("dup_1", 0), ("dup_1", 1)]), proto.calls([("dup_1", 2)]),
                 proto.text()):
        server.replies.append(Reply(chunks=[body], content_type=proto.content_type))
    async with httpx.AsyncClient() as client:
        out = await runtime.exec("add them", provider=proto.make(client, server.url),
                                 model=proto.model, tools=[plus])
    assert (out.stop_reason, out.text) == ("stop", "done"), out.error
    assert len(server.requests) == 3
    calls, results, texts = proto.sent(server.requests[2].json)
    assert len(calls) == 3 and len(set(calls)) == 3, calls
    assert Counter(results) == Counter(calls)
    assert texts == ["3", "7", "11"]
    first = next(m for m in out.messages if isinstance(m, AssistantMessage))
    kept = first.tool_calls()
    assert kept[0].id == "dup_1" and kept[1].id != "dup_1"  # the provider's id while unique
