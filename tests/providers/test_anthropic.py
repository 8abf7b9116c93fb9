"""AnthropicProvider at the wire: fixtures replayed through a real loopback HTTP server."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import httpx
import pytest

from providers._http import RetryPolicy
from providers.accumulate import Accumulator
from providers.anthropic import AnthropicProvider
from providers.base import ForcedTool, ModelRequest, ToolSpec
from providers.events import DoneEvent, ErrorEvent, StartEvent, ToolCallDelta
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

FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)
WEATHER = ToolSpec("get_weather", "Weather for a city.",
                   {"type": "object", "properties": {"location": {"type": "string"}},
                    "required": ["location"]})


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def hello(**kw: object) -> ModelRequest:
    return ModelRequest(model="claude-sonnet-4-5", messages=[UserMessage(content="hi")], **kw)


async def run(server: WireServer, request: ModelRequest, *replies: Reply):
    server.replies.extend(replies)
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client=client, base_url=server.url, api_key="sk-test",
                                     retry=FAST)
        events = [e async for e in provider.stream(request)]
    acc = Accumulator("anthropic", request.model)
    for event in events:
        acc.apply(event)
    return events, acc.message


async def test_text_usage_and_headers(server: WireServer) -> None:
    events, msg = await run(server, hello(), Reply(chunks=[fixture("text.sse")]))
    assert isinstance(events[0], StartEvent) and isinstance(events[-1], DoneEvent)
    assert msg.text() == "Héllo, wörld — 日本語 🙂"
    assert msg.model == "claude-sonnet-4-5-20250929" and msg.stop_reason == "stop"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (25, 15)
    assert (msg.usage.cache_read_tokens, msg.usage.cache_write_tokens) == (7, 3)
    assert msg.usage.total_tokens == 50
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "sk-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert sent.json == {"model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": True,
                         "messages": [{"role": "user",
                                       "content": [{"type": "text", "text": "hi"}]}]}


async def test_thinking_signature_and_redacted(server: WireServer) -> None:
    _, msg = await run(server, hello(), Reply(chunks=[fixture("thinking.sse")]))
    thinking, redacted, text = msg.content
    assert thinking == ThinkingContent(thinking="Let me think: 2 × 3 = 6, ça va.",
                                       signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds")
    assert isinstance(redacted, ThinkingContent) and redacted.redacted
    assert redacted.signature == "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
    assert text == TextContent(text="The answer is 6.")


async def test_two_tool_calls_with_split_arguments(server: WireServer) -> None:
    events, msg = await run(server, hello(), Reply(chunks=[fixture("tool_calls.sse")]))
    assert msg.stop_reason == "tool_use"
    assert [(c.id, c.name, c.arguments) for c in msg.tool_calls()] == [
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather",
         {"location": "Zürich", "unit": "celsius"}),
        ("toolu_02Ab", "get_time", {"tz": "Asia/東京"}),
    ]
    # input_json_delta becomes a toolcall_delta and nothing more (empty fragments are dropped)
    assert [e.delta for e in events if isinstance(e, ToolCallDelta)] == [
        '{"location": "Zü', 'rich", "unit": "c', 'elsius"}', '{"tz": "Asia/東', '京"}']
    assert msg.usage.cache_read_tokens == 100


@pytest.mark.parametrize(("wire", "stop"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("tool_use", "tool_use"), ("refusal", "error"), ("pause_turn", "stop"),
])
async def test_stop_reasons(server: WireServer, wire: str, stop: str) -> None:
    body = fixture("text.sse").replace(b'"end_turn"', f'"{wire}"'.encode())
    events, msg = await run(server, hello(), Reply(chunks=[body]))
    assert msg.stop_reason == stop
    if stop == "error":
        assert isinstance(events[-1], ErrorEvent) and "refusal" in events[-1].error_message


async def test_error_event_midway_is_retryable(server: WireServer) -> None:
    events, msg = await run(server, hello(), Reply(chunks=[fixture("error_midway.sse")]))
    last = events[-1]
    assert isinstance(last, ErrorEvent) and last.retryable
    assert last.error_message == "anthropic: overloaded_error: Overloaded"
    assert msg.text() == "Partial" and msg.stop_reason == "error"
    assert msg.usage.input_tokens == 12


async def test_stream_broken_midway_is_retryable(server: WireServer) -> None:
    chunks = split_at(fixture("text.sse"), 700, 900)
    events, msg = await run(server, hello(), Reply(chunks=chunks, drop_after=2))
    assert isinstance(events[-1], ErrorEvent) and events[-1].retryable
    assert msg.stop_reason == "error"


async def test_stream_ending_without_message_stop_is_retryable(server: WireServer) -> None:
    body = fixture("text.sse").split(b"event: message_delta")[0]
    events, _ = await run(server, hello(), Reply(chunks=[body]))
    assert isinstance(events[-1], ErrorEvent) and events[-1].retryable
    assert "ended before" in events[-1].error_message


async def test_429_with_retry_after_then_success(server: WireServer) -> None:
    busy = Reply(429, [b'{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}'],
                 headers={"retry-after": "0"}, content_type="application/json")
    _, msg = await run(server, hello(), busy, Reply(chunks=[fixture("text.sse")]))
    assert msg.stop_reason == "stop" and len(server.requests) == 2


async def test_500_twice_then_success(server: WireServer) -> None:
    boom = Reply(500, [b'{"type":"error","error":{"type":"api_error","message":"boom"}}'],
                 content_type="application/json")
    _, msg = await run(server, hello(), boom, boom, Reply(chunks=[fixture("text.sse")]))
    assert msg.text().startswith("Héllo") and len(server.requests) == 3


async def test_400_carries_the_providers_message(server: WireServer) -> None:
    bad = Reply(400, [b'{"type":"error","error":{"type":"invalid_request_error",'
                      b'"message":"max_tokens: must be positive"}}'],
                content_type="application/json")
    events, msg = await run(server, hello(), bad)
    assert isinstance(events[0], StartEvent)
    last = events[-1]
    assert isinstance(last, ErrorEvent) and not last.retryable
    assert last.error_message == "anthropic: HTTP 400: max_tokens: must be positive"
    assert len(server.requests) == 1 and msg.stop_reason == "error"


async def test_connection_refused_is_a_retryable_error() -> None:
    async with WireServer() as gone:
        url = gone.url
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client=client, base_url=url, api_key="k", retry=FAST)
        events = [e async for e in provider.stream(hello())]
    assert isinstance(events[-1], ErrorEvent) and events[-1].retryable


async def test_aclose_midway_closes_the_response(server: WireServer) -> None:
    chunks = split_at(fixture("text.sse"), 400)
    server.replies.append(Reply(chunks=chunks, delay=5.0))
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client=client, base_url=server.url, api_key="k", retry=FAST)
        stream = provider.stream(hello())
        task = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(stream.aclose(), 1.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["text.sse", "thinking.sse", "tool_calls.sse"])
async def test_split_anywhere_gives_the_same_message(server: WireServer, name: str) -> None:
    body = fixture(name)
    _, whole = await run(server, hello(), Reply(chunks=[body]))
    multibyte = [i for i in range(len(body)) if body[i] & 0xC0 == 0x80]  # UTF-8 continuation
    rng = random.Random(name)
    cuts = [[o] for o in multibyte[:6]]
    cuts += [rng.sample(range(1, len(body)), rng.randint(1, 8)) for _ in range(20)]
    for offsets in cuts:
        _, msg = await run(server, hello(), Reply(chunks=split_at(body, *offsets)))
        msg.timestamp = whole.timestamp
        assert msg == whole, offsets


async def test_history_tools_and_system_request_json(server: WireServer) -> None:
    weird = "call_abc|fc.1/2"
    history = [
        UserMessage(content=[TextContent(text="look"),
                             ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]),
        AssistantMessage(provider="anthropic", content=[
            ThinkingContent(thinking="hmm", signature="sig-1"),
            ThinkingContent(thinking="", signature="opaque", redacted=True),
            TextContent(text="Calling."),
            ToolCall(id=weird, name="get_weather", arguments={"location": "Oslo"}),
            ToolCall(id="toolu_ok", name="get_weather", arguments={"location": "Rome"}),
        ]),
        ToolResultMessage(tool_call_id=weird, tool_name="get_weather",
                          content=[TextContent(text="-3C")]),
        ToolResultMessage(tool_call_id="toolu_ok", tool_name="get_weather",
                          content=[TextContent(text="no such city")], is_error=True),
        AssistantMessage(provider="openai", content=[
            ThinkingContent(thinking="foreign thought", signature="rs_123"),
            TextContent(text="Done."),
        ]),
        UserMessage(content="thanks"),
    ]
    request = ModelRequest(model="claude-sonnet-4-5", system="Be brief.", messages=history,
                           tools=[WEATHER], temperature=0.2, max_tokens=100,
                           options={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    await run(server, request, Reply(chunks=[fixture("text.sse")]))
    body = server.requests[0].json
    safe = body["messages"][1]["content"][3]["id"]
    assert safe == body["messages"][2]["content"][0]["tool_use_id"]
    assert safe.startswith("call_abc_fc_1_2_") and len(safe) <= 64
    assert body == {
        "model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True, "system": "Be brief.",
        "temperature": 0.2, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "get_weather", "description": "Weather for a city.",
                   "input_schema": WEATHER.parameters}],
        "tool_choice": {"type": "auto"},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "iVBORw0KGgo="}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": safe, "name": "get_weather",
                 "input": {"location": "Oslo"}},
                {"type": "tool_use", "id": "toolu_ok", "name": "get_weather",
                 "input": {"location": "Rome"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": safe, "is_error": False,
                 "content": [{"type": "text", "text": "-3C"}]},
                {"type": "tool_result", "tool_use_id": "toolu_ok", "is_error": True,
                 "content": [{"type": "text", "text": "no such city"}]}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "foreign thought"},
                {"type": "text", "text": "Done."}]},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
        ],
    }


@pytest.mark.parametrize("choice", ["auto", "none"])
async def test_tool_history_without_tools_sends_stub_definitions(server: WireServer,
                                                                 choice) -> None:
    """The API rejects tool_use/tool_result blocks in a request that defines no tools
    ("Requests which include tool_use or tool_result blocks must define tools"): an emptied
    menu keeps a stub per tool the history names, and tool_choice none so none is called."""
    history = [
        UserMessage(content="weather?"),
        AssistantMessage(provider="openai", content=[
            ToolCall(id="call_1", name="get_weather", arguments={"location": "Oslo"}),
            ToolCall(id="call_2", name="get_time", arguments={})]),
        ToolResultMessage(tool_call_id="call_1", tool_name="get_weather",
                          content=[TextContent(text="-3C")]),
        ToolResultMessage(tool_call_id="call_2", tool_name="get_time",
                          content=[TextContent(text="noon")]),
        UserMessage(content="and now?"),
    ]
    request = ModelRequest(model="claude-sonnet-4-5", messages=history, tools=[],
                           tool_choice=choice)
    await run(server, request, Reply(chunks=[fixture("text.sse")]))
    assert server.requests[0].json == {
        "model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": True,
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}},
                  {"name": "get_time", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "none"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather",
                 "input": {"location": "Oslo"}},
                {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "is_error": False,
                 "content": [{"type": "text", "text": "-3C"}]},
                {"type": "tool_result", "tool_use_id": "call_2", "is_error": False,
                 "content": [{"type": "text", "text": "noon"}]},
                {"type": "text", "text": "and now?"}]},
        ],
    }


async def test_no_tools_and_no_tool_history_sends_no_tools(server: WireServer) -> None:
    await run(server, hello(tools=[], tool_choice="none"), Reply(chunks=[fixture("text.sse")]))
    assert "tools" not in server.requests[0].json
    assert "tool_choice" not in server.requests[0].json


@pytest.mark.parametrize(("choice", "parallel", "wire"), [
    ("auto", None, {"type": "auto"}),
    ("required", None, {"type": "any"}),
    ("none", None, {"type": "none"}),
    (ForcedTool("get_weather"), None, {"type": "tool", "name": "get_weather"}),
    ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    (ForcedTool("get_weather"), False,
     {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
    ("auto", True, {"type": "auto"}),
])
async def test_tool_choice_rows(server: WireServer, choice, parallel, wire) -> None:
    request = hello(tools=[WEATHER], tool_choice=choice, parallel_tool_calls=parallel)
    await run(server, request, Reply(chunks=[fixture("text.sse")]))
    assert server.requests[0].json["tool_choice"] == wire
