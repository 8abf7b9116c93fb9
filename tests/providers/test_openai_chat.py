"""The Chat Completions adapter against a real loopback HTTP server (tests/support/wire_server)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from providers._http import RetryPolicy
from providers.base import ForcedTool, ModelRequest, ToolChoice, ToolSpec
from providers.messages import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from providers.openai import OpenAIChatProvider
from tests.providers import collect, fixture, make_client, split_patterns
from tests.support.wire_server import Reply, WireServer, split_at

FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)
HI = ModelRequest(model="gpt-4.1-mini", messages=[UserMessage(content="hi")])
WEATHER = ToolSpec("get_weather", "Weather for a city.",
                   {"type": "object", "properties": {"city": {"type": "string"}}})


@pytest.fixture(params=["httpcore", "lean"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    """Every wire test runs over httpx's default transport and over the lean HTTP/1.1 one."""
    async with make_client(request.param) as c:
        yield c


def chat(client: httpx.AsyncClient, server: WireServer, key: str | None = "sk-test"
         ) -> OpenAIChatProvider:
    return OpenAIChatProvider(client=client, base_url=server.url + "/v1", api_key=key, retry=FAST)


async def test_text_usage_and_cached_tokens(client, server) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_chat/text.sse")]))
    events, msg = await collect(chat(client, server), HI)
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "text_delta",
                                        "text_delta", "text_end", "done"]
    assert events[0].model == "gpt-4.1-mini-2025-04-14"
    assert msg["content"] == [{"type": "text", "text": "héllo 🌍, wörld"}]
    assert msg["stop_reason"] == "stop"
    assert msg["usage"] == {"input_tokens": 176, "output_tokens": 7, "cache_read_tokens": 1024,
                            "cache_write_tokens": 0, "total_tokens": 1207}
    assert server.requests[0].path == "/v1/chat/completions"


@pytest.mark.parametrize(("name", "reason", "blocks"), [
    ("reasoning.sse", "stop", [("thinking", "Thinking… ünïcode"), ("text", "Answer: 42")]),
    ("reasoning_field.sse", "length", [("thinking", "hmm"), ("text", "ok")]),
])
async def test_reasoning_becomes_thinking(client, server, name, reason, blocks) -> None:
    server.replies.append(Reply(chunks=[fixture(f"openai_chat/{name}")]))
    _, msg = await collect(chat(client, server), HI)
    assert [(c["type"], c.get("thinking") or c.get("text")) for c in msg["content"]] == blocks
    assert msg["stop_reason"] == reason


async def test_content_and_tool_calls_with_late_id_and_name(client, server) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_chat/tool_calls.sse")]))
    events, msg = await collect(chat(client, server), HI)
    assert msg["content"] == [
        {"type": "text", "text": "Let me check 🌍."},
        {"type": "tool_call", "id": "call_abc", "name": "get_weather",
         "arguments": {"city": "München", "unit": "C"}},
        {"type": "tool_call", "id": "call_def", "name": "get_time",
         "arguments": {"tz": "Europe/Berlin"}},
    ]
    assert msg["stop_reason"] == "tool_use"
    starts = [e for e in events if e.type == "toolcall_start"]
    assert [(s.id, s.name) for s in starts] == [("call_abc", "get_weather"),
                                                ("call_def", "get_time")]


@pytest.mark.parametrize("name", ["text.sse", "tool_calls.sse", "reasoning.sse"])
async def test_same_message_however_the_bytes_are_split(client, server, name) -> None:
    data = fixture(f"openai_chat/{name}")
    server.replies.append(Reply(chunks=[data]))
    want_events, want = await collect(chat(client, server), HI)
    for offsets in split_patterns(data):
        server.replies.append(Reply(chunks=split_at(data, *offsets)))
        events, got = await collect(chat(client, server), HI)
        assert (events, got) == (want_events, want), offsets


@pytest.mark.parametrize(("name", "message", "retryable"), [
    ("content_filter.sse", "the provider's content filter stopped the reply", False),
    ("error_midway.sse", "The server had an error while processing your request. Sorry about "
                         "that!", True),
    ("no_finish.sse", "stream ended before a finish_reason", True),
])
async def test_stream_failures_are_error_events(client, server, name, message, retryable) -> None:
    server.replies.append(Reply(chunks=[fixture(f"openai_chat/{name}")]))
    events, msg = await collect(chat(client, server), HI)
    assert events[-1].type == "error"
    assert (events[-1].error_message, events[-1].retryable) == (message, retryable)
    assert msg["stop_reason"] == "error"


async def test_broken_stream_is_retryable_error(client, server) -> None:
    data = fixture("openai_chat/text.sse")
    server.replies.append(Reply(chunks=split_at(data, 300, 600), drop_after=2))
    events, msg = await collect(chat(client, server), HI)
    assert events[-1].type == "error" and events[-1].retryable
    assert msg["error_message"].startswith("openai: the stream broke midway")
    assert len(server.requests) == 1


async def test_429_with_retry_after_then_success(client, server) -> None:
    server.replies += [
        Reply(429, [b'{"error":{"message":"Rate limit reached"}}'],
              headers={"retry-after": "0.01"}, content_type="application/json"),
        Reply(chunks=[fixture("openai_chat/text.sse")]),
    ]
    _, msg = await collect(chat(client, server), HI)
    assert msg["stop_reason"] == "stop" and len(server.requests) == 2


async def test_500_twice_then_success(client, server) -> None:
    err = Reply(500, [b'{"error":{"message":"boom"}}'], content_type="application/json")
    server.replies += [err, err, Reply(chunks=[fixture("openai_chat/text.sse")])]
    _, msg = await collect(chat(client, server), HI)
    assert msg["stop_reason"] == "stop" and len(server.requests) == 3


async def test_400_is_not_retried_and_keeps_provider_message(client, server) -> None:
    body = (b'{"error":{"message":"Invalid value for \'tool_choice\'.","type":'
            b'"invalid_request_error","param":"tool_choice","code":null}}')
    server.replies.append(Reply(400, [body], content_type="application/json"))
    events, msg = await collect(chat(client, server), HI)
    assert [e.type for e in events] == ["start", "error"]
    assert msg["error_message"] == "openai: HTTP 400: Invalid value for 'tool_choice'."
    assert events[-1].retryable is False and len(server.requests) == 1


@pytest.mark.parametrize(("key", "auth"), [(None, None), ("sk-test", "Bearer sk-test")])
async def test_authorization_header(client, server, key, auth) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_chat/text.sse")]))
    await collect(chat(client, server, key), HI)
    assert server.requests[0].headers.get("authorization") == auth


# --- what is sent --------------------------------------------------------------------------

PNG = ImageContent(data="iVBORw0KGgo=", mime_type="image/png")
HISTORY = [
    UserMessage(content=[TextContent(text="What is here?"), PNG]),
    AssistantMessage(provider="anthropic", model="claude", content=[
        ThinkingContent(thinking="private", signature="sig-anthropic"),
        TextContent(text="Checking."),
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(id="call_2", name="snap", arguments={}),
    ], stop_reason="tool_use"),
    ToolResultMessage(tool_call_id="call_1", tool_name="get_weather",
                      content=[TextContent(text="no such city")], is_error=True),
    ToolResultMessage(tool_call_id="call_2", tool_name="snap",
                      content=[TextContent(text="took it"), PNG]),
    AssistantMessage(provider="openai", content=[ThinkingContent(thinking="only thoughts")]),
    UserMessage(content="thanks"),
]


async def sent(client, server, request: ModelRequest) -> dict:
    server.replies.append(Reply(chunks=[fixture("openai_chat/text.sse")]))
    await collect(chat(client, server), request)
    return server.requests[-1].json


async def test_request_messages_tools_and_options(client, server) -> None:
    body = await sent(client, server, ModelRequest(
        model="gpt-4.1", system="Be brief.", messages=HISTORY, tools=[WEATHER],
        temperature=0.2, max_tokens=64, options={"reasoning_effort": "low"}))
    data_url = "data:image/png;base64,iVBORw0KGgo="
    assert body == {
        "model": "gpt-4.1", "stream": True, "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is here?"},
                                         {"type": "image_url", "image_url": {"url": data_url}}]},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "snap", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Error: no such city"},
            {"role": "tool", "tool_call_id": "call_2",
             "content": "took it\n(images attached in the next message)"},
            {"role": "user", "content": [
                {"type": "text", "text": "Image from tool result call_2:"},
                {"type": "image_url", "image_url": {"url": data_url}}]},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather for a city.",
            "parameters": WEATHER.parameters}}],
        "tool_choice": "auto",
        "temperature": 0.2, "max_completion_tokens": 64, "reasoning_effort": "low",
    }


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", "auto"), ("required", "required"), ("none", "none"),
    (ForcedTool("get_weather"), {"type": "function", "function": {"name": "get_weather"}}),
])
async def test_tool_choice_rows(client, server, choice: ToolChoice, wire) -> None:
    body = await sent(client, server, ModelRequest(model="m", messages=HI.messages,
                                                   tools=[WEATHER], tool_choice=choice))
    assert body["tool_choice"] == wire
    assert "parallel_tool_calls" not in body


@pytest.mark.parametrize(("tools", "parallel", "expected"), [
    ([WEATHER], False, False), ([WEATHER], True, True), ([WEATHER], None, "absent"),
    ([], False, "absent"),
])
async def test_parallel_tool_calls_only_with_tools(client, server, tools, parallel,
                                                   expected) -> None:
    body = await sent(client, server, ModelRequest(model="m", messages=HI.messages, tools=tools,
                                                   parallel_tool_calls=parallel))
    assert body.get("parallel_tool_calls", "absent") == expected
    assert ("tools" in body) == bool(tools) and ("tool_choice" in body) == bool(tools)


async def test_max_tokens_field_for_compatible_servers(client, server) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_chat/text.sse")]))
    provider = OpenAIChatProvider(client=client, base_url=server.url, api_key=None,
                                  retry=FAST, name="ollama", max_tokens_field="max_tokens")
    await collect(provider, ModelRequest(model="llama3", messages=HI.messages, max_tokens=5))
    assert server.requests[0].json["max_tokens"] == 5
    assert "max_completion_tokens" not in server.requests[0].json


async def test_abort_closes_the_connection(client, server) -> None:
    data = fixture("openai_chat/text.sse")
    server.replies.append(Reply(chunks=split_at(data, 200, 400), delay=0.05))
    stream = chat(client, server).stream(HI)
    first = await anext(stream)
    assert first.type == "start"
    await stream.aclose()  # must not hang or warn about an unclosed response
