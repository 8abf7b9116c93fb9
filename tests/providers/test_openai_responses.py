"""The Responses API adapter against a real loopback HTTP server (tests/support/wire_server)."""

from __future__ import annotations

import json
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
from providers.openai_responses import OpenAIResponsesProvider
from tests.providers import collect, fixture, make_client, split_patterns
from tests.support.wire_server import Reply, split_at

FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)
HI = ModelRequest(model="gpt-4.1", messages=[UserMessage(content="hi")])
WEATHER = ToolSpec("get_weather", "Weather for a city.",
                   {"type": "object", "properties": {"city": {"type": "string"}}})
REASONING_ITEM = {"type": "reasoning", "id": "rs_1", "summary": [
    {"type": "summary_text", "text": "**Planning** the lookup ✓"},
    {"type": "summary_text", "text": "Two calls."}], "encrypted_content": "gAAAAB3nc=="}


@pytest.fixture(params=["httpcore", "lean"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    """Every wire test runs over httpx's default transport and over the lean HTTP/1.1 one."""
    async with make_client(request.param) as c:
        yield c


def responses(client, server, key: str | None = "sk-test") -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(client=client, base_url=server.url + "/v1", api_key=key,
                                   retry=FAST)


async def test_text_and_cached_usage(client, server) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_responses/text.sse")]))
    events, msg = await collect(responses(client, server), HI)
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "text_delta",
                                        "text_delta", "text_end", "done"]
    assert events[0].model == "gpt-4.1-2025-04-14"
    assert msg["content"] == [{"type": "text", "text": "héllo 🌍, wörld", "signature": "msg_1"}]
    assert msg["usage"] == {"input_tokens": 220, "output_tokens": 9, "cache_read_tokens": 1280,
                            "cache_write_tokens": 0, "total_tokens": 1509}
    assert (msg["stop_reason"], server.requests[0].path) == ("stop", "/v1/responses")


async def test_reasoning_text_and_tool_calls(client, server) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_responses/reasoning_tools.sse")]))
    _, msg = await collect(responses(client, server), HI)
    thinking, text, call1, call2 = msg["content"]
    assert thinking["thinking"] == "**Planning** the lookup ✓\n\nTwo calls."
    assert json.loads(thinking["signature"]) == REASONING_ITEM
    assert text == {"type": "text", "text": "Let me check 🌍.", "signature": "msg_2"}
    assert call1 == {"type": "tool_call", "id": "call_abc", "name": "get_weather",
                     "arguments": {"city": "München"}, "signature": "fc_1"}
    assert (call2["id"], call2["arguments"]) == ("call_def", {"tz": "Europe/Berlin"})
    assert msg["stop_reason"] == "tool_use"
    assert msg["usage"]["output_tokens"] == 120


@pytest.mark.parametrize("name", ["text.sse", "reasoning_tools.sse"])
async def test_same_message_however_the_bytes_are_split(client, server, name) -> None:
    data = fixture(f"openai_responses/{name}")
    server.replies.append(Reply(chunks=[data]))
    want_events, want = await collect(responses(client, server), HI)
    for offsets in split_patterns(data):
        server.replies.append(Reply(chunks=split_at(data, *offsets)))
        events, got = await collect(responses(client, server), HI)
        assert (events, got) == (want_events, want), offsets


async def test_incomplete_max_output_tokens_is_length(client, server) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_responses/incomplete.sse")]))
    events, msg = await collect(responses(client, server), HI)
    assert (msg["stop_reason"], msg["content"][0]["text"]) == ("length", "Once upon")
    assert events[-2].type == "text_end"


@pytest.mark.parametrize(("name", "message", "retryable"), [
    ("failed.sse", "The model failed to generate a response.", True),
    ("error.sse", "Invalid prompt: flagged.", False),
    ("no_terminal.sse", "stream ended before response.completed", True),
])
async def test_failures_are_error_events(client, server, name, message, retryable) -> None:
    server.replies.append(Reply(chunks=[fixture(f"openai_responses/{name}")]))
    events, msg = await collect(responses(client, server), HI)
    assert (msg["stop_reason"], msg["error_message"]) == ("error", message)
    assert events[-1].retryable is retryable


async def test_broken_stream_is_retryable(client, server) -> None:
    data = fixture("openai_responses/reasoning_tools.sse")
    server.replies.append(Reply(chunks=split_at(data, 500, 1500), drop_after=2))
    events, msg = await collect(responses(client, server), HI)
    assert events[-1].retryable
    assert msg["error_message"].startswith("openai-responses: the stream broke midway")


async def test_retries_then_success(client, server) -> None:
    server.replies += [
        Reply(429, [b'{"error":{"message":"slow down"}}'], headers={"retry-after": "0"},
              content_type="application/json"),
        Reply(500, [b'{"error":{"message":"boom"}}'], content_type="application/json"),
        Reply(chunks=[fixture("openai_responses/text.sse")]),
    ]
    _, msg = await collect(responses(client, server), HI)
    assert msg["stop_reason"] == "stop" and len(server.requests) == 3


async def test_400_keeps_message_and_is_not_retried(client, server) -> None:
    body = b'{"error":{"message":"Unsupported parameter: \'temperature\'.","code":null}}'
    server.replies.append(Reply(400, [body], content_type="application/json"))
    events, msg = await collect(responses(client, server), HI)
    assert msg["error_message"] == ("openai-responses: HTTP 400: "
                                    "Unsupported parameter: 'temperature'.")
    assert not events[-1].retryable and len(server.requests) == 1


@pytest.mark.parametrize(("key", "auth"), [(None, None), ("sk-x", "Bearer sk-x")])
async def test_authorization_header(client, server, key, auth) -> None:
    server.replies.append(Reply(chunks=[fixture("openai_responses/text.sse")]))
    await collect(responses(client, server, key), HI)
    assert server.requests[0].headers.get("authorization") == auth


# --- what is sent --------------------------------------------------------------------------

PNG = ImageContent(data="iVBORw0KGgo=", mime_type="image/png")


def turn(provider: str) -> AssistantMessage:
    return AssistantMessage(provider=provider, content=[
        ThinkingContent(thinking="plan", signature=json.dumps(REASONING_ITEM)),
        TextContent(text="Checking.", signature="msg_2"),
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"},
                 signature="fc_1"),
    ], stop_reason="tool_use")


def history(provider: str) -> list:
    return [UserMessage(content=[TextContent(text="Look"), PNG]), turn(provider),
            ToolResultMessage(tool_call_id="call_1", tool_name="get_weather",
                              content=[TextContent(text="sunny"), PNG]),
            ToolResultMessage(tool_call_id="call_2", tool_name="x",
                              content=[TextContent(text="bad")], is_error=True)]


async def sent(client, server, request: ModelRequest) -> dict:
    server.replies.append(Reply(chunks=[fixture("openai_responses/text.sse")]))
    await collect(responses(client, server), request)
    return server.requests[-1].json


async def test_request_body_same_provider_replays_items(client, server) -> None:
    body = await sent(client, server, ModelRequest(
        model="o4-mini", system="Be brief.", messages=history("openai-responses"),
        tools=[WEATHER], parallel_tool_calls=False, max_tokens=99,
        options={"reasoning_effort": "low"}))
    url = "data:image/png;base64,iVBORw0KGgo="
    assert body == {
        "model": "o4-mini", "stream": True, "store": False,
        "include": ["reasoning.encrypted_content"], "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Look"},
                                         {"type": "input_image", "image_url": url}]},
            REASONING_ITEM,
            {"type": "message", "role": "assistant", "id": "msg_2", "status": "completed",
             "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city":"Paris"}', "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1",
             "output": "sunny\n(images attached in the next message)"},
            {"type": "function_call_output", "call_id": "call_2", "output": "Error: bad"},
            {"role": "user", "content": [
                {"type": "input_text", "text": "Image from tool result call_1:"},
                {"type": "input_image", "image_url": url}]},
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather for a city.",
                   "parameters": WEATHER.parameters, "strict": False}],
        "tool_choice": "auto", "parallel_tool_calls": False, "max_output_tokens": 99,
        "reasoning": {"effort": "low", "summary": "auto"},
    }


async def test_other_provider_signatures_are_not_replayed(client, server) -> None:
    body = await sent(client, server, ModelRequest(model="m", messages=history("anthropic")))
    assert body["input"][1:4] == [
        {"role": "assistant", "content": "plan"},
        {"role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city":"Paris"}'},
    ]
    assert "tools" not in body and "tool_choice" not in body


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", "auto"), ("required", "required"), ("none", "none"),
    (ForcedTool("get_weather"), {"type": "function", "name": "get_weather"}),
])
async def test_tool_choice_rows(client, server, choice: ToolChoice, wire) -> None:
    body = await sent(client, server, ModelRequest(model="m", messages=HI.messages,
                                                   tools=[WEATHER], tool_choice=choice))
    assert body["tool_choice"] == wire and "parallel_tool_calls" not in body
