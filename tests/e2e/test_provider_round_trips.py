"""A full tool round trip through each provider adapter, through the HTTP service.

For every protocol a loopback ``WireServer`` plays that provider's wire stream twice: (1) a call
to ``e2e_lookup`` whose arguments arrive in pieces where the protocol streams them, then (2) a
text answer. The real service (catalog built from the provider variables) runs the loop over a
real socket; the test reads the SSE log to ``agent_end`` and checks that the tool ran with the
streamed arguments, that the second wire request carried the tool result in the provider's own
shape, and that the run completed with the final text and the summed usage.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.e2e.conftest import serve_catalog
from tests.providers.test_bedrock import encode_item
from tests.support.sse_client import read_all
from tests.support.wire_server import Recorded, Reply, WireServer
from tool_registry import function

CITY = "Zürich"
OUTPUT = f"sunny in {CITY}"
ANSWER = f"It is sunny in {CITY} ☀."
ARGS = ['{"city": "Zü', 'rich"}']  # the arguments as streamed: split inside a word
CALLS: list[str] = []
"""Cities ``e2e_lookup`` was called with (the tool runs on the server's thread)."""


@function(toolsets=["e2e_testing"])
def e2e_lookup(city: str) -> str:
    """Looks up the weather (end-to-end test tool)."""
    CALLS.append(city)
    return f"sunny in {city}"


def sse(*events: dict[str, Any], named: bool = False) -> bytes:
    """``data:`` frames (with ``event: <type>`` lines when ``named``)."""
    out = b""
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        out += f"{head}data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
    return out


# --- wire streams, one pair per protocol -------------------------------------------------------

def chat_streams() -> tuple[bytes, bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def usage(inp: int, out: int) -> dict[str, Any]:
        return {"choices": [], "usage": {"prompt_tokens": inp, "completion_tokens": out,
                                         "total_tokens": inp + out}}

    first = {"index": 0, "id": "call_e2e", "type": "function",
             "function": {"name": "e2e_lookup", "arguments": ARGS[0]}}
    call = sse(chunk({"role": "assistant", "tool_calls": [first]}),
               chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGS[1]}}]}),
               chunk({}, "tool_calls"), usage(10, 5)) + b"data: [DONE]\n\n"
    text = sse(chunk({"role": "assistant", "content": ANSWER[:5]}), chunk({"content": ANSWER[5:]}),
               chunk({}, "stop"), usage(20, 7)) + b"data: [DONE]\n\n"
    return call, text


def responses_streams() -> tuple[bytes, bytes]:
    def completed(inp: int, out: int) -> dict[str, Any]:
        return {"type": "response.completed", "response": {
            "id": "resp_e2e", "status": "completed", "output": [],
            "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}}}

    item = {"id": "fc_1", "type": "function_call", "call_id": "call_e2e", "name": "e2e_lookup",
            "arguments": ""}
    done = {**item, "arguments": "".join(ARGS), "status": "completed"}
    call = sse({"type": "response.created", "response": {"id": "resp_e2e", "output": []}},
               {"type": "response.output_item.added", "output_index": 0, "item": item},
               *({"type": "response.function_call_arguments.delta", "item_id": "fc_1",
                  "output_index": 0, "delta": part} for part in ARGS),
               {"type": "response.output_item.done", "output_index": 0, "item": done},
               completed(10, 5), named=True)
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    text = sse({"type": "response.created", "response": {"id": "resp_e2e2", "output": []}},
               {"type": "response.output_item.added", "output_index": 0, "item": message},
               {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
                "content_index": 0, "delta": ANSWER},
               {"type": "response.output_item.done", "output_index": 0, "item": {
                   **message, "content": [{"type": "output_text", "text": ANSWER}]}},
               completed(20, 7), named=True)
    return call, text


def anthropic_streams() -> tuple[bytes, bytes]:
    def start(inp: int) -> dict[str, Any]:
        return {"type": "message_start", "message": {
            "id": "msg_e2e", "type": "message", "role": "assistant", "content": [],
            "model": "claude-e2e", "usage": {"input_tokens": inp, "output_tokens": 1}}}

    def end(reason: str, out: int) -> list[dict[str, Any]]:
        return [{"type": "message_delta", "delta": {"stop_reason": reason},
                 "usage": {"output_tokens": out}}, {"type": "message_stop"}]

    block = {"type": "tool_use", "id": "toolu_e2e", "name": "e2e_lookup", "input": {}}
    call = sse(start(10), {"type": "content_block_start", "index": 0, "content_block": block},
               *({"type": "content_block_delta", "index": 0,
                  "delta": {"type": "input_json_delta", "partial_json": part}} for part in ARGS),
               {"type": "content_block_stop", "index": 0}, *end("tool_use", 5), named=True)
    text = sse(start(20), {"type": "content_block_start", "index": 0,
                           "content_block": {"type": "text", "text": ""}},
               {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": ANSWER}},
               {"type": "content_block_stop", "index": 0}, *end("end_turn", 7), named=True)
    return call, text


def gemini_streams() -> tuple[bytes, bytes]:
    def reply(part: dict[str, Any], inp: int, out: int) -> bytes:
        body = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": inp, "candidatesTokenCount": out,
                                  "totalTokenCount": inp + out}, "responseId": "resp-e2e"}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()

    call = {"functionCall": {"name": "e2e_lookup", "args": {"city": CITY}},
            "thoughtSignature": "c2lnLWUyZQ=="}
    return reply(call, 10, 5), reply({"text": ANSWER}, 20, 7)


def bedrock_streams() -> tuple[bytes, bytes]:
    def frames(*items: tuple[str, dict[str, Any]]) -> bytes:
        return b"".join(encode_item({"event": e, "payload": p}) for e, p in items)

    def tail(reason: str, inp: int, out: int) -> list[tuple[str, dict[str, Any]]]:
        return [("messageStop", {"stopReason": reason}),
                ("metadata", {"usage": {"inputTokens": inp, "outputTokens": out,
                                        "totalTokens": inp + out}, "metrics": {"latencyMs": 1}})]

    start = {"toolUse": {"toolUseId": "tooluse_e2e", "name": "e2e_lookup"}}
    call = frames(("messageStart", {"role": "assistant"}),
                  ("contentBlockStart", {"contentBlockIndex": 0, "start": start}),
                  *(("contentBlockDelta", {"contentBlockIndex": 0,
                                           "delta": {"toolUse": {"input": part}}})
                    for part in ARGS),
                  ("contentBlockStop", {"contentBlockIndex": 0}), *tail("tool_use", 10, 5))
    text = frames(("messageStart", {"role": "assistant"}),
                  ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": ANSWER}}),
                  ("contentBlockStop", {"contentBlockIndex": 0}), *tail("end_turn", 20, 7))
    return call, text


# --- the cases -----------------------------------------------------------------------------------

@dataclass
class Case:
    model: str
    path: str
    streams: Callable[[], tuple[bytes, bytes]]
    env: Callable[[str], dict[str, str]]
    """Environment variables given the wire server's URL."""
    result: Callable[[Any], Any]
    """The part of the second request body that carries the tool result."""
    expected: Any
    auth: tuple[str, str | None]
    """(header, value) the wire requests must carry (None: absent)."""
    content_type: str = "text/event-stream"
    settings: dict[str, Any] = field(default_factory=dict)


CASES = {
    "openai": Case(
        "openai:gpt-e2e", "/v1/chat/completions", chat_streams,
        lambda url: {"OPENAI_API_KEY": "sk-e2e", "OPENAI_BASE_URL": f"{url}/v1"},
        lambda body: body["messages"][-1],
        {"role": "tool", "tool_call_id": "call_e2e", "content": OUTPUT},
        ("authorization", "Bearer sk-e2e")),
    "openai-responses": Case(
        "openai-responses:gpt-e2e", "/v1/responses", responses_streams,
        lambda url: {"OPENAI_API_KEY": "sk-e2e", "OPENAI_BASE_URL": f"{url}/v1"},
        lambda body: body["input"][-1],
        {"type": "function_call_output", "call_id": "call_e2e", "output": OUTPUT},
        ("authorization", "Bearer sk-e2e")),
    "anthropic": Case(
        "anthropic:claude-e2e", "/v1/messages", anthropic_streams,
        lambda url: {"ANTHROPIC_API_KEY": "ak-e2e", "ANTHROPIC_BASE_URL": url},
        lambda body: body["messages"][-1],
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_e2e",
                                      "is_error": False,
                                      "content": [{"type": "text", "text": OUTPUT}]}]},
        ("x-api-key", "ak-e2e")),
    "gemini": Case(
        "gemini:gemini-e2e", "/v1beta/models/gemini-e2e:streamGenerateContent", gemini_streams,
        lambda url: {"GEMINI_API_KEY": "gk-e2e", "GEMINI_BASE_URL": url},
        lambda body: body["contents"][-2:],
        [{"role": "model", "parts": [{"functionCall": {"name": "e2e_lookup",
                                                       "args": {"city": CITY}},
                                      "thoughtSignature": "c2lnLWUyZQ=="}]},
         {"role": "user", "parts": [{"functionResponse": {"name": "e2e_lookup",
                                                          "response": {"output": OUTPUT}}}]}],
        ("x-goog-api-key", "gk-e2e")),
    "bedrock": Case(
        "bedrock:anthropic.claude-e2e-v1:0", "/model/anthropic.claude-e2e-v1%3A0/converse-stream",
        bedrock_streams,
        lambda url: {"AWS_BEARER_TOKEN_BEDROCK": "bk-e2e", "AWS_REGION": "us-east-1",
                     "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url},
        lambda body: body["messages"][-1],
        {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_e2e",
                                                     "content": [{"text": OUTPUT}],
                                                     "status": "success"}}]},
        ("authorization", "Bearer bk-e2e"), content_type="application/vnd.amazon.eventstream"),
    "ollama": Case(
        "ollama:llama-e2e", "/v1/chat/completions", chat_streams, lambda url: {},
        lambda body: body["messages"][-1],
        {"role": "tool", "tool_call_id": "call_e2e", "content": OUTPUT},
        ("authorization", None)),
}


def check_wire(case: Case, requests: list[Recorded]) -> None:
    assert len(requests) == 2
    for sent in requests:
        assert sent.method == "POST" and sent.path == case.path
        header, value = case.auth
        assert sent.headers.get(header) == value
    assert case.result(requests[1].json) == case.expected
    assert "e2e_lookup" in json.dumps(requests[0].json)  # the tool was on the menu


@pytest.mark.parametrize("name", list(CASES))
async def test_tool_round_trip(name: str, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[name]
    CALLS.clear()
    async with WireServer() as wire:
        call, text = case.streams()
        # the first reply cut mid-frame, to exercise the adapters' reassembly too
        wire.replies += [Reply(chunks=[call[:57], call[57:]], content_type=case.content_type),
                         Reply(chunks=[text], content_type=case.content_type)]
        for key, value in case.env(wire.url).items():
            monkeypatch.setenv(key, value)
        settings = dict(case.settings)
        if name == "ollama":  # the built-in profile's base URL, overridden
            settings["openai_profiles"] = json.dumps({"ollama": {"base_url": f"{wire.url}/v1"}})
        async with serve_catalog(backend=backend, **settings) as api:
            run = await api.create(model=case.model, input=f"Weather in {CITY}?",
                                   tools=["e2e_lookup"])
            frames = await read_all(api.client, run["events_url"])
            done = await api.wait_status(run["id"], "completed")
    assert CALLS == [CITY]
    ends = [f.data for f in frames if f.event == "tool_execution_end"]
    assert [(e["tool_name"], e["is_error"]) for e in ends] == [("e2e_lookup", False)]
    assert [(c["type"], c["text"]) for c in ends[0]["result"]["content"]] == [("text", OUTPUT)]
    starts = [f.data for f in frames if f.event == "tool_execution_start"]
    assert starts[0]["args"] == {"city": CITY}
    streamed = "".join(f.data["delta"]["text"] for f in frames if f.event == "message_update"
                       and f.data["delta"]["kind"] == "toolcall_delta")
    assert json.loads(streamed) == {"city": CITY}  # the client saw the arguments stream in
    check_wire(case, wire.requests)
    end = frames[-1]
    assert end.event == "agent_end" and end.data["stop_reason"] == "stop"
    assert done["result"] == ANSWER and done["stop_reason"] == "stop"
    assert [m["role"] for m in done["messages"]] == ["user", "assistant", "tool_result",
                                                     "assistant"]
    usage = done["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (30, 12)
    assert usage["total_tokens"] == 42
    assert end.data["usage"]["total_tokens"] == 42
