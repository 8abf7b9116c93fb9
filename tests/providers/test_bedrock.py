"""BedrockProvider at the wire: real binary event-stream frames through a loopback server."""

from __future__ import annotations

import json
import random
import struct
import sys
import zlib
from pathlib import Path

import httpx
import pytest

from providers._http import RetryPolicy
from providers.accumulate import Accumulator
from providers.base import ForcedTool, ModelRequest, ToolSpec
from providers.bedrock import BedrockProvider
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

FIXTURES = Path(__file__).parent / "fixtures" / "bedrock"
FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)
MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
EVENTSTREAM = "application/vnd.amazon.eventstream"
WEATHER = ToolSpec("get_weather", "Weather for a city.",
                   {"type": "object", "properties": {"location": {"type": "string"}},
                    "required": ["location"]})


# --- a small application/vnd.amazon.eventstream encoder -----------------------------------

def _string_header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (struct.pack(">B", len(raw_name)) + raw_name + b"\x07"  # 7 = string
            + struct.pack(">H", len(raw_value)) + raw_value)


def encode_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """prelude (total length, headers length, CRC32) + headers + payload + message CRC32."""
    head = b"".join(_string_header(k, v) for k, v in headers.items())
    prelude = struct.pack(">II", 12 + len(head) + len(payload) + 4, len(head))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + head + payload
    return message + struct.pack(">I", zlib.crc32(message))


def encode_item(item: dict) -> bytes:
    payload = json.dumps(item["payload"], ensure_ascii=False).encode()
    if "exception" in item:
        headers = {":exception-type": item["exception"], ":content-type": "application/json",
                   ":message-type": "exception"}
    else:
        headers = {":event-type": item["event"], ":content-type": "application/json",
                   ":message-type": "event"}
    return encode_frame(headers, payload)


def script(name: str, replace: tuple[str, str] | None = None) -> list[bytes]:
    text = (FIXTURES / name).read_text()
    if replace:
        text = text.replace(*replace)
    return [encode_item(item) for item in json.loads(text)]


def stream_body(name: str, replace: tuple[str, str] | None = None) -> bytes:
    return b"".join(script(name, replace))


# --- harness ------------------------------------------------------------------------------

def bearer_env(server: WireServer) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.url, "AWS_REGION": "us-west-2",
            "AWS_BEARER_TOKEN_BEDROCK": "bedrock-api-key"}


def hello(**kw: object) -> ModelRequest:
    return ModelRequest(model=MODEL, messages=[UserMessage(content="hi")], **kw)


def ok(body: bytes) -> Reply:
    return Reply(chunks=[body], content_type=EVENTSTREAM)


async def run(server: WireServer, request: ModelRequest, *replies: Reply,
              env: dict[str, str] | None = None):
    server.replies.extend(replies)
    async with httpx.AsyncClient() as client:
        provider = BedrockProvider.from_env(client=client, env=env or bearer_env(server),
                                            retry=FAST)
        events = [e async for e in provider.stream(request)]
    acc = Accumulator("bedrock", request.model)
    for event in events:
        acc.apply(event)
    return events, acc.message


def test_encoder_round_trips_through_botocore() -> None:
    from botocore.eventstream import EventStreamBuffer

    buffer = EventStreamBuffer()
    buffer.add_data(stream_body("text.json"))
    messages = list(buffer)
    assert len(messages) == 6
    assert messages[1].headers[":event-type"] == "contentBlockDelta"
    assert json.loads(messages[1].payload)["delta"]["text"] == "Héllo, wörld"


# --- streams ------------------------------------------------------------------------------

async def test_text_usage_url_and_bearer(server: WireServer) -> None:
    events, msg = await run(server, hello(), ok(stream_body("text.json")))
    assert isinstance(events[0], StartEvent) and isinstance(events[-1], DoneEvent)
    assert msg.text() == "Héllo, wörld — 日本語 🙂" and msg.stop_reason == "stop"
    usage = msg.usage
    assert (usage.input_tokens, usage.output_tokens) == (25, 15)
    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.total_tokens) == (7, 3, 50)
    sent = server.requests[0]
    assert sent.path == "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"
    assert sent.headers["authorization"] == "Bearer bedrock-api-key"
    assert sent.json == {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}


async def test_reasoning_signature_and_redacted(server: WireServer) -> None:
    _, msg = await run(server, hello(), ok(stream_body("thinking.json")))
    assert msg.content == [
        ThinkingContent(thinking="Let me think: 2 × 3 = 6, ça va.",
                        signature="EqQBCgIYAhIM1gbcDa9G"),
        ThinkingContent(thinking="", signature="RW13S0FoZ0JFZ3kzdmEz", redacted=True),
        TextContent(text="The answer is 6."),
    ]


async def test_two_tool_calls_with_split_input(server: WireServer) -> None:
    events, msg = await run(server, hello(), ok(stream_body("tool_calls.json")))
    assert msg.stop_reason == "tool_use"
    assert [(c.id, c.name, c.arguments) for c in msg.tool_calls()] == [
        ("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "get_weather",
         {"location": "Zürich", "unit": "celsius"}),
        ("tooluse_2", "get_time", {"tz": "Asia/東京"}),
    ]
    assert [e.delta for e in events if isinstance(e, ToolCallDelta)] == [
        '{"location": "Zü', 'rich", "unit": "c', 'elsius"}', '{"tz": "Asia/東', '京"}']
    assert msg.usage.cache_read_tokens == 100 and msg.usage.total_tokens == 661


@pytest.mark.parametrize(("wire", "stop"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("tool_use", "tool_use"), ("guardrail_intervened", "error"), ("content_filtered", "error"),
])
async def test_stop_reasons(server: WireServer, wire: str, stop: str) -> None:
    body = stream_body("text.json", ('"end_turn"', f'"{wire}"'))
    events, msg = await run(server, hello(), ok(body))
    assert msg.stop_reason == stop
    if stop == "error":
        assert isinstance(events[-1], ErrorEvent) and wire in events[-1].error_message
        assert events[-1].usage.input_tokens == 25


async def test_exception_frame_midway_is_retryable(server: WireServer) -> None:
    events, msg = await run(server, hello(), ok(stream_body("exception_midway.json")))
    last = events[-1]
    assert isinstance(last, ErrorEvent) and last.retryable
    assert last.error_message == ("bedrock: throttlingException: "
                                  "Too many requests, please wait before trying again.")
    assert msg.text() == "Partial"


async def test_validation_exception_frame_is_not_retryable(server: WireServer) -> None:
    frames = script("exception_midway.json", ("throttlingException", "validationException"))
    events, _ = await run(server, hello(), ok(b"".join(frames)))
    assert isinstance(events[-1], ErrorEvent) and not events[-1].retryable


@pytest.mark.parametrize("where", ["message", "prelude"])
async def test_corrupted_crc_is_a_clear_error(server: WireServer, where: str) -> None:
    frames = script("text.json")
    bad = bytearray(frames[2])
    bad[-1 if where == "message" else 8] ^= 0xFF
    frames[2] = bytes(bad)
    events, msg = await run(server, hello(), ok(b"".join(frames)))
    last = events[-1]
    assert isinstance(last, ErrorEvent) and last.retryable
    assert "corrupt event stream frame" in last.error_message
    assert "ChecksumMismatch" in last.error_message
    assert msg.text() == "Héllo, wörld"


async def test_stream_broken_midway_is_retryable(server: WireServer) -> None:
    events, _ = await run(server, hello(), Reply(chunks=script("text.json"), drop_after=3,
                                                 content_type=EVENTSTREAM))
    assert isinstance(events[-1], ErrorEvent) and events[-1].retryable


async def test_partial_last_frame_is_retryable(server: WireServer) -> None:
    body = stream_body("text.json")
    events, _ = await run(server, hello(), ok(body[:-10]))
    assert isinstance(events[-1], ErrorEvent) and events[-1].retryable
    assert "ended inside a frame" in events[-1].error_message


async def test_429_with_retry_after_then_success(server: WireServer) -> None:
    busy = Reply(429, [b'{"message":"Too many requests, please wait before trying again."}'],
                 headers={"retry-after": "0", "x-amzn-errortype": "ThrottlingException"},
                 content_type="application/json")
    _, msg = await run(server, hello(), busy, ok(stream_body("text.json")))
    assert msg.stop_reason == "stop" and len(server.requests) == 2


async def test_500_twice_then_success(server: WireServer) -> None:
    boom = Reply(500, [b'{"message":"Internal server error"}'], content_type="application/json")
    _, msg = await run(server, hello(), boom, boom, ok(stream_body("text.json")))
    assert msg.stop_reason == "stop" and len(server.requests) == 3


async def test_400_carries_the_providers_message(server: WireServer) -> None:
    bad = Reply(400, [b'{"message":"The provided model identifier is invalid."}'],
                headers={"x-amzn-errortype": "ValidationException"},
                content_type="application/json")
    events, _ = await run(server, hello(), bad)
    last = events[-1]
    assert isinstance(last, ErrorEvent) and not last.retryable
    assert last.error_message == "bedrock: HTTP 400: The provided model identifier is invalid."


@pytest.mark.parametrize("name", ["text.json", "thinking.json", "tool_calls.json"])
async def test_split_anywhere_gives_the_same_message(server: WireServer, name: str) -> None:
    body = stream_body(name)
    _, whole = await run(server, hello(), ok(body))
    multibyte = [i for i in range(len(body)) if body[i] & 0xC0 == 0x80]
    rng = random.Random(name)
    cuts = [[o] for o in multibyte[:6]] + [[o] for o in range(1, 16)]  # inside the prelude
    cuts += [rng.sample(range(1, len(body)), rng.randint(1, 8)) for _ in range(20)]
    for offsets in cuts:
        _, msg = await run(server, hello(), Reply(chunks=split_at(body, *offsets),
                                                  content_type=EVENTSTREAM))
        msg.timestamp = whole.timestamp
        assert msg == whole, offsets


# --- authorisation ------------------------------------------------------------------------

def sigv4_env(server: WireServer) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.url, "AWS_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_SESSION_TOKEN": "session-token"}


async def test_sigv4_signs_the_request_it_sends(server: WireServer) -> None:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    _, msg = await run(server, hello(), ok(stream_body("text.json")), env=sigv4_env(server))
    assert msg.stop_reason == "stop"
    sent = server.requests[0]
    auth = sent.headers["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKID/")
    assert "/eu-west-1/bedrock/aws4_request" in auth
    assert sent.headers["x-amz-date"] and sent.headers["x-amz-security-token"] == "session-token"
    # recompute the signature over what the server received: nothing changed after signing
    signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    url = server.url + sent.path
    replay = AWSRequest(method="POST", url=url, data=sent.body,
                        headers={h: sent.headers[h] for h in signed})
    replay.context["timestamp"] = sent.headers["x-amz-date"]
    signer = SigV4Auth(Credentials("AKID", "secret", "session-token"), "bedrock", "eu-west-1")
    string_to_sign = signer.string_to_sign(replay, signer.canonical_request(replay))
    assert auth.endswith("Signature=" + signer.signature(string_to_sign, replay))


async def test_sigv4_without_botocore_is_a_clear_error(server: WireServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "botocore.auth", None)
    events, _ = await run(server, hello(), env=sigv4_env(server))
    assert isinstance(events[-1], ErrorEvent)
    assert "`bedrock` extra" in events[-1].error_message
    assert server.requests == []


async def test_default_endpoint_from_region() -> None:
    env = {"AWS_REGION": "ap-south-1", "AWS_BEARER_TOKEN_BEDROCK": "secret-token-123"}
    async with httpx.AsyncClient() as client:
        provider = BedrockProvider.from_env(client=client, env=env)
    assert "https://bedrock-runtime.ap-south-1.amazonaws.com" in repr(provider)
    assert "secret-token-123" not in repr(provider)


# --- request JSON -------------------------------------------------------------------------

async def test_history_tools_and_system_request_json(server: WireServer) -> None:
    weird = "call_abc|fc.1/2"
    history = [
        UserMessage(content=[TextContent(text="look"),
                             ImageContent(data="/9j/4AAQ", mime_type="image/jpeg")]),
        AssistantMessage(provider="bedrock", content=[
            ThinkingContent(thinking="hmm", signature="sig-1"),
            ThinkingContent(thinking="", signature="b3BhcXVl", redacted=True),
            TextContent(text="Calling."),
            ToolCall(id=weird, name="get_weather", arguments={"location": "Oslo"}),
            ToolCall(id="tooluse_ok", name="get_weather", arguments={"location": "Rome"}),
        ]),
        ToolResultMessage(tool_call_id=weird, tool_name="get_weather",
                          content=[TextContent(text="-3C")]),
        ToolResultMessage(tool_call_id="tooluse_ok", tool_name="get_weather",
                          content=[TextContent(text="no such city")], is_error=True),
        AssistantMessage(provider="anthropic", content=[
            ThinkingContent(thinking="foreign thought", signature="anthropic-sig"),
            TextContent(text="Done."),
        ]),
        UserMessage(content="thanks"),
    ]
    request = ModelRequest(model=MODEL, system="Be brief.", messages=history, tools=[WEATHER],
                           tool_choice="required", temperature=0.2, max_tokens=100,
                           parallel_tool_calls=False)
    await run(server, request, ok(stream_body("text.json")))
    body = server.requests[0].json
    safe = body["messages"][1]["content"][3]["toolUse"]["toolUseId"]
    assert safe.startswith("call_abc_fc_1_2_") and len(safe) <= 64
    assert body == {
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {"maxTokens": 100, "temperature": 0.2},
        "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather",
                                               "description": "Weather for a city.",
                                               "inputSchema": {"json": WEATHER.parameters}}}],
                       "toolChoice": {"any": {}}},
        "messages": [
            {"role": "user", "content": [
                {"text": "look"},
                {"image": {"format": "jpeg", "source": {"bytes": "/9j/4AAQ"}}}]},
            {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig-1"}}},
                {"reasoningContent": {"redactedContent": "b3BhcXVl"}},
                {"text": "Calling."},
                {"toolUse": {"toolUseId": safe, "name": "get_weather",
                             "input": {"location": "Oslo"}}},
                {"toolUse": {"toolUseId": "tooluse_ok", "name": "get_weather",
                             "input": {"location": "Rome"}}}]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": safe, "content": [{"text": "-3C"}],
                                "status": "success"}},
                {"toolResult": {"toolUseId": "tooluse_ok", "content": [{"text": "no such city"}],
                                "status": "error"}}]},
            {"role": "assistant", "content": [{"text": "foreign thought"}, {"text": "Done."}]},
            {"role": "user", "content": [{"text": "thanks"}]},
        ],
    }


@pytest.mark.parametrize(("choice", "wire"), [
    ("auto", {"auto": {}}),
    ("required", {"any": {}}),
    (ForcedTool("get_weather"), {"tool": {"name": "get_weather"}}),
])
async def test_tool_choice_rows(server: WireServer, choice, wire) -> None:
    await run(server, hello(tools=[WEATHER], tool_choice=choice), ok(stream_body("text.json")))
    assert server.requests[0].json["toolConfig"]["toolChoice"] == wire


async def test_tool_choice_none_withholds_tools(server: WireServer) -> None:
    await run(server, hello(tools=[WEATHER], tool_choice="none"), ok(stream_body("text.json")))
    assert "toolConfig" not in server.requests[0].json


async def test_tool_choice_none_keeps_specs_when_history_uses_tools(server: WireServer) -> None:
    call = ToolCall(id="t1", name="get_weather")
    history = [UserMessage(content="hi"), AssistantMessage(provider="bedrock", content=[call]),
               ToolResultMessage(tool_call_id="t1", tool_name="get_weather")]
    request = ModelRequest(model=MODEL, messages=history, tools=[WEATHER], tool_choice="none")
    await run(server, request, ok(stream_body("text.json")))
    body = server.requests[0].json
    assert body["toolConfig"] == {"tools": [{"toolSpec": {
        "name": "get_weather", "description": "Weather for a city.",
        "inputSchema": {"json": WEATHER.parameters}}}]}
    assert body["messages"][2]["content"] == [{"toolResult": {
        "toolUseId": "t1", "content": [{"text": "(no output)"}], "status": "success"}}]
