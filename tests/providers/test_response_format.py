"""A response format at the wire, per adapter (real loopback HTTP): the native field where the
protocol has one, the system-prompt instruction where it has none or cannot take it."""

from __future__ import annotations

import json

import httpx
import orjson

from providers._http import RetryPolicy
from providers._output_format import instruction
from providers.anthropic import AnthropicProvider
from providers.base import ModelRequest, ResponseFormat, ToolSpec
from providers.bedrock import BedrockProvider
from providers.demo import DemoProvider
from providers.gemini import GeminiProvider
from providers.messages import ToolResultMessage, UserMessage, text_result
from providers.openai import OpenAIChatProvider
from providers.openai_responses import OpenAIResponsesProvider
from tests.providers import collect, fixture
from tests.providers.test_bedrock import EVENTSTREAM, bearer_env, stream_body
from tests.support.wire_server import Reply, WireServer
from tool_registry.json_validate import validate

FAST = RetryPolicy(attempts=1, base_delay=0.001, max_delay=0.01)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                           "temp": {"type": "number"}},
          "required": ["city", "temp"], "additionalProperties": False}
LOOSE = ResponseFormat(name="weather", schema=SCHEMA, description="the weather")
STRICT = ResponseFormat(name="weather", schema=SCHEMA, strict=True)
TOOL = ToolSpec("get_weather", "Weather for a city.",
                {"type": "object", "properties": {"city": {"type": "string"}}})


def ask(fmt: ResponseFormat, *, tools: bool = False, system: str | None = "Be brief."
        ) -> ModelRequest:
    return ModelRequest(model="m-1", system=system, messages=[UserMessage(content="hi")],
                        tools=[TOOL] if tools else [], response_format=fmt)


async def sent(server: WireServer, provider: object, request: ModelRequest, reply: Reply
               ) -> dict:
    server.replies.append(reply)
    await collect(provider, request)  # type: ignore[arg-type]
    return server.requests[-1].json


# --- OpenAI: native on every request, tools or not --------------------------------------

async def test_openai_chat_sends_json_schema_beside_tools(server: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        provider = OpenAIChatProvider(client=client, base_url=server.url, api_key="k",
                                      retry=FAST)
        body = await sent(server, provider, ask(LOOSE, tools=True),
                          Reply(chunks=[fixture("openai_chat/text.sse")]))
        strict = await sent(server, provider, ask(STRICT),
                            Reply(chunks=[fixture("openai_chat/text.sse")]))
    assert body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "weather", "schema": SCHEMA, "strict": False, "description": "the weather"}}
    assert body["tools"] and body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert strict["response_format"]["json_schema"]["strict"] is True
    assert "description" not in strict["response_format"]["json_schema"]


async def test_openai_responses_sends_text_format(server: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        provider = OpenAIResponsesProvider(client=client, base_url=server.url, api_key="k",
                                           retry=FAST)
        body = await sent(server, provider, ask(STRICT, tools=True),
                          Reply(chunks=[fixture("openai_responses/text.sse")]))
    assert body["text"] == {"format": {"type": "json_schema", "name": "weather",
                                       "schema": SCHEMA, "strict": True}}
    assert body["tools"] and body["instructions"] == "Be brief."


async def test_no_format_sends_no_format_field(server: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        provider = OpenAIChatProvider(client=client, base_url=server.url, api_key="k",
                                      retry=FAST)
        body = await sent(server, provider, ModelRequest(model="m", messages=[
            UserMessage(content="hi")]), Reply(chunks=[fixture("openai_chat/text.sse")]))
    assert "response_format" not in body


# --- Anthropic and Bedrock: native for strict formats, the instruction otherwise ---------

async def test_anthropic_strict_is_output_config_format(server: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client=client, base_url=server.url, api_key="k",
                                     retry=FAST)
        body = await sent(server, provider, ask(STRICT, tools=True),
                          Reply(chunks=[fixture("anthropic/text.sse")]))
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert body["system"] == "Be brief." and body["tools"]


async def test_anthropic_loose_format_is_an_instruction(server: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        provider = AnthropicProvider(client=client, base_url=server.url, api_key="k",
                                     retry=FAST)
        body = await sent(server, provider, ask(LOOSE),
                          Reply(chunks=[fixture("anthropic/text.sse")]))
        bare = await sent(server, provider, ask(LOOSE, system=None),
                          Reply(chunks=[fixture("anthropic/text.sse")]))
    assert "output_config" not in body
    assert body["system"] == f"Be brief.\n\n{instruction(LOOSE)}"
    assert bare["system"] == instruction(LOOSE)
    assert json.dumps(SCHEMA, separators=(",", ":")) in instruction(LOOSE)
    assert 'format "weather": the weather' in instruction(LOOSE)


async def test_bedrock_strict_is_output_config_text_format(server: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        provider = BedrockProvider.from_env(client=client, env=bearer_env(server), retry=FAST)
        server.replies.append(Reply(chunks=[stream_body("text.json")],
                                    content_type=EVENTSTREAM))
        await collect(provider, ask(STRICT, tools=True))
        server.replies.append(Reply(chunks=[stream_body("text.json")],
                                    content_type=EVENTSTREAM))
        await collect(provider, ask(LOOSE))
    strict, loose = server.requests[0].json, server.requests[1].json
    text_format = strict["outputConfig"]["textFormat"]
    assert text_format["type"] == "json_schema"
    definition = text_format["structure"]["jsonSchema"]
    assert definition["name"] == "weather" and json.loads(definition["schema"]) == SCHEMA
    assert strict["system"] == [{"text": "Be brief."}] and strict["toolConfig"]["tools"]
    assert "outputConfig" not in loose
    assert loose["system"] == [{"text": f"Be brief.\n\n{instruction(LOOSE)}"}]


# --- Gemini: native only on requests without tools ---------------------------------------

async def test_gemini_native_without_tools_instruction_with_them(server: WireServer) -> None:
    async with httpx.AsyncClient() as client:
        provider = GeminiProvider(client=client, base_url=server.url, api_key="k", retry=FAST)
        plain = await sent(server, provider, ask(LOOSE, system=None),
                           Reply(chunks=[fixture("gemini/text.sse")]))
        tooled = await sent(server, provider, ask(STRICT, tools=True),
                            Reply(chunks=[fixture("gemini/text.sse")]))
    assert plain["generationConfig"] == {"responseMimeType": "application/json",
                                         "responseJsonSchema": SCHEMA}
    assert "systemInstruction" not in plain
    assert "responseMimeType" not in tooled.get("generationConfig", {})
    assert tooled["systemInstruction"] == {"parts": [
        {"text": f"Be brief.\n\n{instruction(STRICT)}"}]}
    assert tooled["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"


# --- the demo model: valid JSON for the schema, offline ----------------------------------

async def test_demo_answers_with_a_value_of_the_schema() -> None:
    history = [UserMessage(content="weather in Paris, 21 degrees?"),
               text_result("21.5", tool_call_id="c1", tool_name="get_weather")]
    schema = {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20}, "temp": {"type": "number"},
        "unit": {"enum": ["C", "F"]}, "tags": {"type": "array", "items": {"type": "string"},
                                               "minItems": 2},
        "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/day"}]}},
        "required": ["city", "temp"], "$defs": {"day": {"type": "integer", "minimum": 1}}}
    fmt = ResponseFormat(name="w", schema=schema)
    for messages in ([history[0]], history):
        _, msg = await collect(DemoProvider(), ModelRequest(
            model="echo", messages=list(messages), tools=[TOOL], response_format=fmt))
        value = orjson.loads(msg["content"][0]["text"])
        assert validate(schema, value) == [], value
    assert isinstance(messages[-1], ToolResultMessage) and value["temp"] == 21.5


async def test_demo_still_calls_a_named_tool_under_a_format() -> None:
    _, msg = await collect(DemoProvider(), ModelRequest(
        model="echo", messages=[UserMessage(content="get_weather for 'Oslo'")], tools=[TOOL],
        response_format=LOOSE))
    assert msg["stop_reason"] == "tool_use"
    assert msg["content"][0]["name"] == "get_weather"
