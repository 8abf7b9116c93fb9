"""The real `ai` package (7.x, pinned by package-lock.json) against ``/ai-sdk/chat``.

``ai_sdk_chat.mjs`` sends with the SDK's ``DefaultChatTransport`` (whose stream parser
validates every chunk with ``uiMessageChunkSchema`` and throws on the first it rejects) and
builds the message with ``readUIMessageStream``, on both backends.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from app import runtime
from providers import fake
from providers.messages import AssistantMessage, ToolResultMessage, UserMessage
from tests.api.conftest import Api
from tests.js.node_client import run_node
from tool_registry import function

# several Node processes per test, on a machine shared with other suites (load 10-16 measured)
pytestmark = pytest.mark.timeout(180)


@function(toolsets=["aisdk_testing"])
def aisdk_weather(city: str) -> str:
    """The weather in a city (test tool)."""
    return f"sunny in {city}"


GATE = threading.Event()


@function(toolsets=["aisdk_testing"])
async def aisdk_gate() -> str:
    """Waits until the test opens the gate (test tool)."""
    opened = await asyncio.to_thread(GATE.wait, 30)
    return "opened" if opened else "timed out"


@function(toolsets=["aisdk_testing"])
async def aisdk_delegate(task: str) -> str:
    """Runs a nested loop (test tool)."""
    out = await runtime.exec(task, tools=[])
    return f"inner said: {out.text}"


def user(text: str, id_: str = "u1") -> dict[str, Any]:
    return {"id": id_, "role": "user", "parts": [{"type": "text", "text": text}]}


async def chat(api: Api, chat_id: str, messages: list[dict[str, Any]],
               **spec: Any) -> dict[str, Any]:
    return await run_node("ai_sdk_chat.mjs", {"api": api.url + "/ai-sdk/chat", "action": "send",
                                              "chatId": chat_id, "messages": messages, **spec},
                          package="ai")


def types(out: dict[str, Any]) -> list[str]:
    return [c["type"] for c in out["chunks"]]


async def test_a_tool_call_with_streamed_arguments_and_the_answer(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_weather", {"city": "Paris"}), arg_chunks=3),
                       fake.text("It is sunny in Paris.", chunks=3)]
    out = await chat(api, "chat-1", [user("Weather in Paris?")],
                     body={"tools": ["aisdk_weather"]})
    assert out["errors"] == []
    got = types(out)
    assert got[:3] == ["start", "start-step", "tool-input-start"]
    assert got.count("tool-input-delta") == 3
    assert got[-1] == "finish" and got.count("start-step") == got.count("finish-step") == 2
    message = out["message"]
    run_id = message["metadata"]["run_id"]
    assert message["id"] == run_id and message["metadata"]["stop_reason"] == "stop"
    tool = message["parts"][1]
    assert tool["type"] == "tool-aisdk_weather" and tool["state"] == "output-available"
    assert tool["input"] == {"city": "Paris"}
    assert tool["output"]["content"] == [{"type": "text", "text": "sunny in Paris"}]
    assert message["parts"][-1] == {"type": "text", "text": "It is sunny in Paris.",
                                    "state": "done"}
    assert [p["type"] for p in message["parts"]] == [
        "step-start", "tool-aisdk_weather", "step-start", "text"]
    assert (await api.get(run_id))["metadata"]["chat_id"] == "chat-1"


async def test_an_error_run_ends_with_the_sdk_error_chunk(api: Api) -> None:
    api.fake.script = [fake.error("the model exploded")]
    out = await chat(api, "chat-err", [user("hi")])
    assert len(out["errors"]) == 1 and "the model exploded" in out["errors"][0]
    assert out["chunks"][-1]["finishReason"] == "error"
    assert out["message"]["metadata"]["stop_reason"] == "error"


async def test_a_failed_tool_is_an_output_error_part(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_weather", {"town": "Paris"})),
                       fake.text("sorry")]
    out = await chat(api, "chat-tool-err", [user("weather?")], body={"tools": ["aisdk_weather"]})
    tool = out["message"]["parts"][1]
    assert tool["state"] == "output-error" and "city" in tool["errorText"]


async def test_the_resume_request_replays_and_continues_a_live_run(api: Api) -> None:
    GATE.clear()
    api.fake.script = [fake.tool_calls(("aisdk_gate", {})),
                       fake.text("one two three four five", chunks=5)]
    body = {"id": "chat-resume", "messages": [user("count")], "tools": ["aisdk_gate"]}
    async with api.client.stream("POST", "/ai-sdk/chat", json=body) as resp:
        assert resp.headers["x-vercel-ai-ui-message-stream"] == "v1"
        async for line in resp.aiter_lines():
            if '"tool-input-available"' in line:
                break  # the page reloads mid-answer: the stream closes, the run goes on
    # the reconnect replays the log; the gate opens once it reads, and the rest comes live
    out = await run_node("ai_sdk_chat.mjs", {"api": api.url + "/ai-sdk/chat",
                                             "action": "resume", "chatId": "chat-resume"},
                         package="ai", on_line=lambda _: GATE.set())
    assert out["stream"] == "read" and out["errors"] == []
    assert types(out)[0] == "start" and types(out)[-1] == "finish"
    assert out["message"]["parts"][-1]["text"] == "one two three four five"
    run = await api.wait_status(out["message"]["id"], "completed")
    assert run["result"] == "one two three four five"
    ended = await run_node("ai_sdk_chat.mjs", {"api": api.url + "/ai-sdk/chat",
                                               "action": "resume", "chatId": "chat-resume"},
                           package="ai")
    assert ended["stream"] == "none"  # 204: nothing active, the SDK stays idle


async def test_a_second_request_on_the_chat_continues_the_conversation(api: Api) -> None:
    api.fake.script = [fake.text("Hello Ada."), fake.text("Your name is Ada.")]
    first = await chat(api, "chat-2", [user("I am Ada")])
    history = [user("I am Ada"), first["message"], user("Who am I?", "u2")]
    second = await chat(api, "chat-2", history)
    assert second["message"]["parts"][-1]["text"] == "Your name is Ada."
    sent = api.fake.requests[1].messages
    assert [type(m) for m in sent] == [UserMessage, AssistantMessage, UserMessage]
    assert sent[1].content[0].text == "Hello Ada."  # type: ignore[union-attr]
    runs = (await api.client.get("/runs", params={"metadata.chat_id": "chat-2"})).json()
    assert len(runs["runs"]) == 2


async def test_the_chat_is_a_thread_so_the_new_message_alone_continues_it(api: Api) -> None:
    api.fake.script = [fake.text("Hello Ada."), fake.text("Your name is Ada.")]
    await chat(api, "chat-thread", [user("I am Ada")])
    second = await chat(api, "chat-thread", [user("Who am I?", "u2")])  # no history sent
    assert second["errors"] == [] and second["message"]["parts"][-1]["text"] == "Your name is Ada."
    sent = api.fake.requests[1].messages
    assert [type(m) for m in sent] == [UserMessage, AssistantMessage, UserMessage]
    assert sent[0].content[0].text == "I am Ada"  # type: ignore[union-attr]
    found = (await api.client.get("/threads", params={"metadata.chat_id": "chat-thread"})
             ).json()["threads"]
    assert len(found) == 1 and found[0]["run_count"] == 2
    thread = (await api.client.get(f"/threads/{found[0]['id']}")).json()
    assert [m["role"] for m in thread["messages"]] == ["user", "assistant"] * 2
    assert second["message"]["id"] == thread["runs"][1] == found[0]["last_run"]


async def test_tool_history_from_the_ui_message_reaches_the_model(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_weather", {"city": "Oslo"})),
                       fake.text("Snow."), fake.text("Still snow.")]
    first = await chat(api, "chat-3", [user("Oslo?")], body={"tools": ["aisdk_weather"]})
    await chat(api, "chat-3", [user("Oslo?"), first["message"], user("And now?", "u2")],
               body={"tools": ["aisdk_weather"]})
    sent = api.fake.requests[2].messages
    assert [type(m) for m in sent] == [UserMessage, AssistantMessage, ToolResultMessage,
                                       AssistantMessage, UserMessage]
    assert isinstance(sent[2], ToolResultMessage) and sent[2].content[0].text == "sunny in Oslo"  # type: ignore[union-attr]


async def test_a_nested_run_shows_as_preliminary_output_of_its_tool(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_delegate", {"task": "inner"})),
                       fake.text("inner answer"), fake.text("outer answer")]
    out = await chat(api, "chat-nested", [user("go")], body={"tools": ["aisdk_delegate"]})
    assert out["errors"] == []
    previews = [c for c in out["chunks"] if c.get("preliminary")]
    assert previews and previews[-1]["output"]["parts"] == [
        {"type": "text", "text": "inner answer", "depth": 1}]
    tool = out["message"]["parts"][1]
    assert tool["state"] == "output-available" and "preliminary" not in tool
    assert tool["output"]["content"][0]["text"] == "inner said: inner answer"
    assert out["message"]["parts"][-1]["text"] == "outer answer"


async def test_stop_leaves_the_run_running_unless_asked_to_cancel(api: Api) -> None:
    api.fake.script, api.fake.repeat = [fake.hanging("thinking...")], True
    kept = await chat(api, "chat-stop", [user("go")], stopAfter=4)
    run_id = kept["chunks"][0]["messageId"]
    assert (await api.get(run_id))["status"] == "running"
    await api.client.post(f"/runs/{run_id}/cancel")
    await api.wait_status(run_id, "cancelled")

    cut = await chat(api, "chat-stop-2", [user("go")], stopAfter=4,
                     body={"cancel_on_disconnect": True})
    run = await api.wait_status(cut["chunks"][0]["messageId"], "cancelled", within=20)
    assert run["stop_reason"] == "aborted"


async def test_bad_requests_name_the_field_in_plain_text(api: Api) -> None:
    """The SDK shows a refused request's body verbatim as ``error.message``: the message (with
    the field) is the body, the code and field are headers."""
    async def post(body: dict[str, Any]) -> httpx.Response:
        return await api.client.post("/ai-sdk/chat", json=body)

    def refused(resp: httpx.Response, status: int, code: str, field: str | None) -> None:
        assert resp.status_code == status, resp.text
        assert resp.headers["content-type"].startswith("text/plain")
        assert resp.headers["x-agentloop-error-code"] == code
        assert resp.headers.get("x-agentloop-error-field") == field
        assert not resp.text.startswith("{") and (field is None or field in resp.text)

    refused(await post({"id": "c", "messages": [user("hi"), {"id": "a", "role": "assistant",
                                                             "parts": []}]}),
            422, "validation_error", "messages[1].role")
    refused(await post({"id": "c", "messages": [user("hi")], "tools": ["nope"]}),
            400, "unknown_tool", "tools[0]")
    refused(await post({"id": "c", "messages": [{"id": "u", "role": "user", "parts": [
        {"type": "file", "mediaType": "image/png", "url": "javascript:alert(1)"}]}]}),
        422, "validation_error", "messages[0].parts[0].url")
    refused(await post({"id": "c", "messages": [{"id": "u", "role": "user", "parts": [
        {"type": "file", "mediaType": "text/plain", "url": "http://example.com/a.txt"}]}]}),
        422, "validation_error", "messages[0].parts[0].url")
    refused(await post({"id": "../x", "messages": [user("hi")]}), 422, "validation_error", "id")
    refused(await api.client.post("/ai-sdk/chat", content=b"{", headers={
        "content-type": "application/json"}), 400, "invalid_json", None)
    refused(await api.client.post("/ai-sdk/chat", content=b"x", headers={
        "content-type": "text/plain"}), 415, "unsupported_media_type", None)
    assert (await api.client.get("/ai-sdk/chat/no-such-chat/stream")).status_code == 204
    native = await api.client.post("/runs", json={"input": "hi", "tools": ["nope"]})
    assert native.json()["error"]["field"] == "tools[0]"  # other doors keep the JSON body


async def test_the_sdk_shows_the_refusal_as_its_error_message(api: Api) -> None:
    out = await chat(api, "chat-refused", [user("hi")], body={"tools": ["nope"]})
    assert out["errors"] == [] and out["thrown"] is not None
    assert out["thrown"].startswith("tools[0]") and "nope" in out["thrown"]


@function(toolsets=["aisdk_testing"], approval=True)
def aisdk_guarded(note: str) -> str:
    """Needs a person's approval (test tool)."""
    return f"written: {note}"


def responded(message: dict[str, Any], approved: bool, reason: str | None = None
              ) -> dict[str, Any]:
    """What the SDK's addToolApprovalResponse does to the waiting part."""
    parts = [{**p, "state": "approval-responded",
              "approval": {**p["approval"], "approved": approved, "reason": reason}}
             if p.get("state") == "approval-requested" else p for p in message["parts"]]
    return {**message, "parts": parts}


@pytest.mark.parametrize("approved", [True, False])
async def test_tool_approval_round_trip(api: Api, approved: bool) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_guarded", {"note": "x"})), fake.text("Done.")]
    body = {"tools": ["aisdk_guarded"]}
    first = await chat(api, "chat-approve", [user("write x")], body=body)
    assert first["errors"] == [] and types(first)[-1] == "finish"
    assert first["chunks"][-1]["finishReason"] == "tool-calls"
    part = first["message"]["parts"][-1]
    assert part["state"] == "approval-requested" and part["approval"]["id"] == part["toolCallId"]
    run = await api.wait_status(first["message"]["id"], "requires_action")
    answer = responded(first["message"], approved, None if approved else "not now")
    second = await chat(api, "chat-approve", [user("write x"), answer], body=body,
                        message=answer)
    assert second["autoSend"]["approvals"] is True and second["errors"] == []
    assert second["message"]["id"] == run["id"]  # the same assistant message goes on
    tool = next(p for p in second["message"]["parts"] if p.get("toolCallId"))
    if approved:
        assert tool["state"] == "output-available"
        assert tool["output"]["content"][0]["text"] == "written: x"
    else:
        assert tool["state"] == "output-denied"
        sent = api.fake.requests[1].messages[-1]
        assert "not now" in sent.content[0].text  # type: ignore[union-attr]
    assert second["message"]["parts"][-1]["text"] == "Done."
    assert (await api.get(run["id"]))["status"] == "completed"


@function(toolsets=["aisdk_testing"])
async def aisdk_subagent(task: str) -> str:
    """Runs a nested loop (test tool)."""
    from app import runtime

    out = await runtime.exec(task)
    return f"inner said: {out.text}"


async def test_a_nested_approval_is_a_part_of_its_own_answered_by_the_sdk(api: Api) -> None:
    """A subagent's pick that needs approval parks the run: the SDK gets it as a tool part in
    ``approval-requested`` (beside the depth-0 call's preliminary trace) and answers it with
    addToolApprovalResponse like any other."""
    api.fake.script = [fake.tool_calls(("aisdk_subagent", {"task": "inner"}, "o1")),
                       fake.tool_calls(("aisdk_guarded", {"note": "deep"}, "n1")),
                       fake.text("inner ok"), fake.text("Done.")]
    body = {"tools": ["aisdk_subagent", "aisdk_guarded"]}
    first = await chat(api, "chat-nested", [user("delegate")], body=body)
    assert first["errors"] == [] and first["chunks"][-1]["finishReason"] == "tool-calls"
    part = first["message"]["parts"][-1]
    assert (part["toolCallId"], part["state"]) == ("n1", "approval-requested")
    run = await api.wait_status(first["message"]["id"], "requires_action")
    assert run["pending"][0]["depth"] == 1
    answer = responded(first["message"], True)
    second = await chat(api, "chat-nested", [user("delegate"), answer], body=body,
                        message=answer)
    assert second["errors"] == []
    tools = {p["toolCallId"]: p for p in second["message"]["parts"] if p.get("toolCallId")}
    assert tools["n1"]["state"] == "output-available"
    assert tools["n1"]["output"]["content"][0]["text"] == "written: deep"
    assert tools["o1"]["output"]["content"][0]["text"] == "inner said: inner ok"
    assert second["message"]["parts"][-1]["text"] == "Done."
    assert (await api.get(run["id"]))["status"] == "completed"


async def test_a_client_side_tool_answered_with_add_tool_output(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("get_location", {})), fake.text("You are in Paris.")]
    body = {"client_tools": [{"name": "get_location", "description": "the user's position"}]}
    first = await chat(api, "chat-client-tool", [user("where am I?")], body=body)
    part = first["message"]["parts"][-1]
    assert part["state"] == "input-available" and part["type"] == "tool-get_location"
    assert first["chunks"][-1]["finishReason"] == "tool-calls"
    # what addToolOutput({toolCallId, output}) does to the part
    answered = {**first["message"], "parts": [
        *first["message"]["parts"][:-1], {**part, "state": "output-available",
                                          "output": "48.85,2.35"}]}
    second = await chat(api, "chat-client-tool", [user("where am I?"), answered], body=body,
                        message=answered)
    assert second["autoSend"]["toolCalls"] is True and second["errors"] == []
    assert second["message"]["parts"][-1]["text"] == "You are in Paris."
    result = api.fake.requests[1].messages[-1]
    assert isinstance(result, ToolResultMessage) and result.content[0].text == "48.85,2.35"  # type: ignore[union-attr]
    stale = await api.client.post("/ai-sdk/chat", json={"id": "chat-client-tool", "messages": [
        user("where am I?"), answered]})
    assert stale.status_code == 409  # the run waits for nothing any more
