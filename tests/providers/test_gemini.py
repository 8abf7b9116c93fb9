"""GeminiProvider at the wire: fixtures replayed through a real loopback HTTP server."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from providers._http import RetryPolicy
from providers.accumulate import Accumulator
from providers.base import ForcedTool, ModelRequest, ToolSpec
from providers.events import DoneEvent, ErrorEvent, StartEvent, ToolCallDelta
from providers.gemini import SKIP_SIGNATURE, GeminiProvider
from providers.messages import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support.wire_server import Reply, WireServer, split_at

FIXTURES = Path(__file__).parent / "fixtures" / "gemini"
FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)
WEATHER = ToolSpec("get_weather", "Weather for a city.",
                   {"type": "object", "properties": {"location": {"type": "string"}},
                    "required": ["location"], "additionalProperties": False})


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def hello(**kw: object) -> ModelRequest:
    return ModelRequest(model="gemini-2.5-flash", messages=[UserMessage(content="hi")], **kw)


async def run(server: WireServer, request: ModelRequest, *replies: Reply):
    server.replies.extend(replies)
    async with httpx.AsyncClient() as client:
        provider = GeminiProvider(client=client, base_url=server.url, api_key="g-key",
                                  retry=FAST)
        events = [e async for e in provider.stream(request)]
    acc = Accumulator("gemini", request.model)
    for event in events:
        acc.apply(event)
    return events, acc.message


async def test_text_usage_url_and_key_header(server: WireServer) -> None:
    events, msg = await run(server, hello(), Reply(chunks=[fixture("text.sse")]))
    assert isinstance(events[0], StartEvent) and isinstance(events[-1], DoneEvent)
    assert msg.text() == "Héllo, wörld — 日本語 🙂" and msg.stop_reason == "stop"
    assert msg.model == "gemini-2.5-flash"
    usage = msg.usage
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (5, 4, 12)
    assert usage.total_tokens == 21
    sent = server.requests[0]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert sent.query == {"alt": ["sse"]}  # and no key in the URL
    assert sent.headers["x-goog-api-key"] == "g-key"
    assert sent.json == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


async def test_thinking_and_text_signature(server: WireServer) -> None:
    _, msg = await run(server, hello(), Reply(chunks=[fixture("thinking.sse")]))
    assert msg.content == [
        ThinkingContent(thinking="**Plan** 2 × 3 = 6, ça va."),
        TextContent(text="The answer is 6.", signature="CiIBVKhc7oDPpCaXyJKKGD3dYTDXI3uBqPx=="),
    ]
    assert msg.usage.output_tokens == 35 and msg.usage.total_tokens == 45


async def test_two_function_calls(server: WireServer) -> None:
    events, msg = await run(server, hello(), Reply(chunks=[fixture("tool_calls.sse")]))
    assert msg.stop_reason == "tool_use" and msg.text() == "Checking both cities."
    first, second = msg.tool_calls()
    assert first == ToolCall(id="call_resp-tools_1", name="get_weather",
                             arguments={"location": "Zürich", "unit": "celsius"},
                             signature="Cp4CAVKhc7w==")
    assert second == ToolCall(id="fc-time-1", name="get_time", arguments={"tz": "Asia/東京"})
    # each whole functionCall is one toolcall_delta with the full JSON
    assert [e.delta for e in events if isinstance(e, ToolCallDelta)] == [
        '{"location":"Zürich","unit":"celsius"}', '{"tz":"Asia/東京"}']


@pytest.mark.parametrize(("wire", "stop"), [
    ("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "error"), ("RECITATION", "error"),
    ("MALFORMED_FUNCTION_CALL", "error"),
])
async def test_finish_reasons(server: WireServer, wire: str, stop: str) -> None:
    body = fixture("text.sse").replace(b'"STOP"', f'"{wire}"'.encode())
    events, msg = await run(server, hello(), Reply(chunks=[body]))
    assert msg.stop_reason == stop
    if stop == "error":
        assert isinstance(events[-1], ErrorEvent) and wire in events[-1].error_message


async def test_blocked_prompt_is_an_error(server: WireServer) -> None:
    body = (b'data: {"promptFeedback": {"blockReason": "SAFETY"},"usageMetadata": '
            b'{"promptTokenCount": 7,"totalTokenCount": 7}}\n\n')
    events, msg = await run(server, hello(), Reply(chunks=[body]))
    assert isinstance(events[-1], ErrorEvent) and "SAFETY" in events[-1].error_message
    assert msg.usage.input_tokens == 7


async def test_error_event_midway_is_retryable(server: WireServer) -> None:
    events, msg = await run(server, hello(), Reply(chunks=[fixture("error_midway.sse")]))
    last = events[-1]
    assert isinstance(last, ErrorEvent) and last.retryable
    assert "overloaded" in last.error_message and msg.text() == "Partial"


async def test_stream_broken_midway_is_retryable(server: WireServer) -> None:
    chunks = split_at(fixture("text.sse"), 100, 250)
    events, _ = await run(server, hello(), Reply(chunks=chunks, drop_after=2))
    assert isinstance(events[-1], ErrorEvent) and events[-1].retryable


async def test_stream_ending_without_finish_reason_is_retryable(server: WireServer) -> None:
    body = fixture("text.sse").split(b"\n\n")[0] + b"\n\n"
    events, _ = await run(server, hello(), Reply(chunks=[body]))
    assert isinstance(events[-1], ErrorEvent) and events[-1].retryable


async def test_429_with_retry_after_then_success(server: WireServer) -> None:
    busy = Reply(429, [b'[{"error": {"code": 429, "message": "Resource exhausted",'
                       b' "status": "RESOURCE_EXHAUSTED"}}]'],
                 headers={"retry-after": "0"}, content_type="application/json")
    _, msg = await run(server, hello(), busy, Reply(chunks=[fixture("text.sse")]))
    assert msg.stop_reason == "stop" and len(server.requests) == 2


async def test_500_twice_then_success(server: WireServer) -> None:
    boom = Reply(500, [b'{"error": {"code": 500, "message": "internal", "status": "INTERNAL"}}'],
                 content_type="application/json")
    _, msg = await run(server, hello(), boom, boom, Reply(chunks=[fixture("text.sse")]))
    assert msg.stop_reason == "stop" and len(server.requests) == 3


async def test_400_carries_the_providers_message(server: WireServer) -> None:
    bad = Reply(400, [b'{"error": {"code": 400, "message": "API key not valid.",'
                      b' "status": "INVALID_ARGUMENT"}}'], content_type="application/json")
    events, _ = await run(server, hello(), bad)
    last = events[-1]
    assert isinstance(last, ErrorEvent) and not last.retryable
    assert last.error_message == "gemini: HTTP 400: API key not valid."
    assert "g-key" not in last.error_message


@pytest.mark.parametrize("name", ["text.sse", "thinking.sse", "tool_calls.sse"])
async def test_split_anywhere_gives_the_same_message(server: WireServer, name: str) -> None:
    body = fixture(name)
    _, whole = await run(server, hello(), Reply(chunks=[body]))
    multibyte = [i for i in range(len(body)) if body[i] & 0xC0 == 0x80]
    rng = random.Random(name)
    cuts = [[o] for o in multibyte[:6]]
    cuts += [rng.sample(range(1, len(body)), rng.randint(1, 8)) for _ in range(20)]
    for offsets in cuts:
        _, msg = await run(server, hello(), Reply(chunks=split_at(body, *offsets)))
        msg.timestamp = whole.timestamp
        assert msg == whole, offsets


async def test_history_tools_and_system_request_json(server: WireServer) -> None:
    history = [
        UserMessage(content=[TextContent(text="look"),
                             ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]),
        AssistantMessage(provider="gemini", content=[
            ThinkingContent(thinking="hmm", signature="th-sig"),
            TextContent(text="Calling.", signature="tx-sig"),
            ToolCall(id="call_x_1", name="get_weather", arguments={"location": "Oslo"},
                     signature="fc-sig"),
            ToolCall(id="call_x_2", name="get_weather", arguments={"location": "Rome"}),
        ]),
        ToolResultMessage(tool_call_id="call_x_1", tool_name="get_weather",
                          content=[TextContent(text="-3C")]),
        ToolResultMessage(tool_call_id="call_x_2", tool_name="get_weather",
                          content=[TextContent(text="no such city")], is_error=True),
        AssistantMessage(provider="anthropic", content=[
            ThinkingContent(thinking="foreign thought", signature="anthropic-sig"),
            ToolCall(id="toolu_1", name="get_weather", arguments={}, signature="nope"),
        ]),
        ToolResultMessage(tool_call_id="toolu_1", tool_name="get_weather",
                          content=[TextContent(text="ok")]),
        UserMessage(content="thanks"),
    ]
    request = ModelRequest(model="gemini-2.5-pro", system="Be brief.", messages=history,
                           tools=[WEATHER], temperature=0.2, max_tokens=100,
                           parallel_tool_calls=False,
                           options={"thinkingConfig": {"thinkingBudget": 1024}})
    await run(server, request, Reply(chunks=[fixture("text.sse")]))
    assert server.requests[0].json == {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [{"functionDeclarations": [{"name": "get_weather",
                                             "description": "Weather for a city.",
                                             "parametersJsonSchema": WEATHER.parameters}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"temperature": 0.2, "maxOutputTokens": 100,
                             "thinkingConfig": {"thinkingBudget": 1024}},
        "contents": [
            {"role": "user", "parts": [
                {"text": "look"}, {"inlineData": {"mimeType": "image/png",
                                                  "data": "iVBORw0KGgo="}}]},
            {"role": "model", "parts": [
                {"text": "hmm", "thought": True, "thoughtSignature": "th-sig"},
                {"text": "Calling.", "thoughtSignature": "tx-sig"},
                {"functionCall": {"name": "get_weather", "args": {"location": "Oslo"}},
                 "thoughtSignature": "fc-sig"},
                {"functionCall": {"name": "get_weather", "args": {"location": "Rome"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "-3C"}}},
                {"functionResponse": {"name": "get_weather",
                                      "response": {"error": "no such city"}}}]},
            {"role": "model", "parts": [
                {"text": "foreign thought"},
                {"functionCall": {"name": "get_weather", "args": {}},
                 "thoughtSignature": SKIP_SIGNATURE}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "ok"}}},
                {"text": "thanks"}]},
        ],
    }


async def test_unsigned_function_calls_get_the_documented_dummy_signature(
        server: WireServer) -> None:
    """The first call of each step needs a signature on Gemini 3: calls from another provider
    (or a Gemini one that came without) get ``skip_thought_signature_validator``; later calls of
    the same step and real signatures are left as they are."""
    history = [
        UserMessage(content="weather?"),
        AssistantMessage(provider="openai", content=[
            TextContent(text="Two lookups."),
            ToolCall(id="call_a", name="get_weather", arguments={"location": "Oslo"}),
            ToolCall(id="call_b", name="get_weather", arguments={"location": "Rome"})]),
        ToolResultMessage(tool_call_id="call_a", tool_name="get_weather",
                          content=[TextContent(text="-3C")]),
        ToolResultMessage(tool_call_id="call_b", tool_name="get_weather",
                          content=[TextContent(text="18C")]),
        AssistantMessage(provider="gemini", content=[
            ToolCall(id="fc_1", name="get_weather", arguments={"location": "Bern"})]),
        ToolResultMessage(tool_call_id="fc_1", tool_name="get_weather",
                          content=[TextContent(text="5C")]),
        AssistantMessage(provider="gemini", content=[
            ToolCall(id="fc_2", name="get_weather", arguments={"location": "Pisa"},
                     signature="real-sig")]),
        ToolResultMessage(tool_call_id="fc_2", tool_name="get_weather",
                          content=[TextContent(text="20C")]),
    ]
    request = ModelRequest(model="gemini-3-pro-preview", messages=history, tools=[WEATHER])
    await run(server, request, Reply(chunks=[fixture("text.sse")]))
    models = [c["parts"] for c in server.requests[0].json["contents"] if c["role"] == "model"]
    assert models == [
        [{"text": "Two lookups."},
         {"functionCall": {"name": "get_weather", "args": {"location": "Oslo"}},
          "thoughtSignature": "skip_thought_signature_validator"},
         {"functionCall": {"name": "get_weather", "args": {"location": "Rome"}}}],
        [{"functionCall": {"name": "get_weather", "args": {"location": "Bern"}},
          "thoughtSignature": "skip_thought_signature_validator"}],
        [{"functionCall": {"name": "get_weather", "args": {"location": "Pisa"}},
          "thoughtSignature": "real-sig"}],
    ]


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", {"mode": "AUTO"}),
    ("required", {"mode": "ANY"}),
    ("none", {"mode": "NONE"}),
    (ForcedTool("get_weather"), {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
])
async def test_tool_choice_rows(server: WireServer, choice, wire) -> None:
    await run(server, hello(tools=[WEATHER], tool_choice=choice),
              Reply(chunks=[fixture("text.sse")]))
    assert server.requests[0].json["toolConfig"] == {"functionCallingConfig": wire}
