"""Whole ``useChat`` sessions: the real `ai` package's chat engine (``AbstractChat``, what
``useChat`` runs) with its transport, ``onToolCall``, ``sendAutomaticallyWhen`` and
``regenerate()`` (``ai_sdk_session.mjs``), on both backends: server tools marked
``providerExecuted``, approvals, client tools, the history a reload restores, regenerate, a
refused message that does not poison the chat, and the metadata a page reads."""

from __future__ import annotations

from typing import Any

import pytest

from providers import fake
from providers.messages import AssistantMessage, UserMessage
from tests.api.conftest import Api
from tests.js.node_client import run_node
from tests.js.test_ai_sdk import aisdk_guarded, aisdk_subagent, aisdk_weather

__all__ = ["aisdk_guarded", "aisdk_subagent", "aisdk_weather"]  # registered by importing them
pytestmark = pytest.mark.timeout(180)
LOCATION = {"name": "get_location", "description": "the user's position"}


async def session(api: Api, chat_id: str, steps: list[dict[str, Any]], **spec: Any
                  ) -> dict[str, Any]:
    return await run_node("ai_sdk_session.mjs", {"api": api.url + "/ai-sdk/chat",
                                                 "chatId": chat_id, "steps": steps, **spec},
                          package="ai", within=120)


async def history(api: Api, chat_id: str) -> list[dict[str, Any]]:
    resp = await api.client.get(f"/ai-sdk/chat/{chat_id}/messages")
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def tool_parts(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["toolCallId"]: p for p in message["parts"] if "toolCallId" in p}


async def test_server_tools_run_on_the_server_and_client_tools_on_the_page(api: Api) -> None:
    """``onToolCall`` fires for the client tool alone; its output goes back by itself
    (``sendAutomaticallyWhen``) and the run goes on; the history equals what the page built."""
    api.fake.script = [fake.tool_calls(("aisdk_weather", {"city": "Paris"}, "w1")),
                       fake.tool_calls(("get_location", {}, "l1")), fake.text("Sunny here.")]
    out = await session(api, "s-tools", [{"op": "send", "text": "weather here?"}],
                        body={"tools": ["aisdk_weather"], "client_tools": [LOCATION]},
                        clientTools={"get_location": "48.85,2.35"})
    assert out["errors"] == [] and out["status"] == "ready"
    assert out["toolCalls"] == ["get_location"]
    assert [r["trigger"] for r in out["requests"]] == ["submit-message", "submit-message"]
    user, reply = out["messages"]
    parts = tool_parts(reply)
    assert parts["w1"]["providerExecuted"] is True and parts["w1"]["state"] == "output-available"
    assert "providerExecuted" not in parts["l1"] and parts["l1"]["output"] == "48.85,2.35"
    assert reply["parts"][-1]["text"] == "Sunny here."
    assert await history(api, "s-tools") == out["messages"]
    assert user["id"] == out["requests"][0]["last"]["id"]  # the client's own id, kept


async def test_an_approval_of_a_server_tool_fires_no_on_tool_call(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_guarded", {"note": "x"}, "g1")),
                       fake.text("Written.")]
    out = await session(api, "s-approve", [{"op": "send", "text": "write x"},
                                           {"op": "approve", "approved": True}],
                        body={"tools": ["aisdk_guarded"]})
    assert out["errors"] == [] and out["toolCalls"] == []
    assert len(out["requests"]) == 2  # the approval went back by itself
    reply = out["messages"][-1]
    part = tool_parts(reply)["g1"]
    assert part["state"] == "output-available" and part["providerExecuted"] is True
    assert part["approval"]["approved"] is True
    assert reply["parts"][-1]["text"] == "Written."
    restored = await history(api, "s-approve")
    assert [m["role"] for m in restored] == ["user", "assistant"]
    got = tool_parts(restored[-1])["g1"]
    assert got["state"] == "output-available" and got["approval"] == {"id": "g1"}
    # the page kept its approval response on the part; the server's copy is the request
    assert {**restored[-1], "parts": [p for p in restored[-1]["parts"] if "toolCallId" not in p]
            } == {**reply, "parts": [p for p in reply["parts"] if "toolCallId" not in p]}


async def test_a_reload_restores_the_chat_and_goes_on(api: Api) -> None:
    api.fake.script = [fake.text("Hello Ada."), fake.text("You are Ada.")]
    first = await session(api, "s-reload", [{"op": "send", "text": "I am Ada"}])
    restored = await history(api, "s-reload")
    assert restored == first["messages"]
    meta = restored[-1]["metadata"]
    assert meta["stop_reason"] == "stop" and meta["model"] and meta["run_id"]
    assert meta["steps"][0]["usage"]["input_tokens"] == 10 and meta["usage"]["input_tokens"] == 10
    again = await session(api, "s-reload", [{"op": "send", "text": "Who am I?"}],
                          messages=restored)
    assert again["errors"] == [] and again["messages"][:2] == restored
    assert again["messages"][-1]["parts"][-1]["text"] == "You are Ada."
    sent = api.fake.requests[1].messages
    assert [type(m) for m in sent] == [UserMessage, AssistantMessage, UserMessage]
    assert await history(api, "s-reload") == again["messages"]


async def test_regenerate_replaces_the_last_reply(api: Api) -> None:
    api.fake.script = [fake.text("Paris."), fake.text("Lyon."), fake.text("Nice.")]
    out = await session(api, "s-regen", [{"op": "send", "text": "a city?"},
                                         {"op": "regenerate"}])
    assert out["errors"] == [], out["errors"]
    assert [r["trigger"] for r in out["requests"]] == ["submit-message", "regenerate-message"]
    _, reply = out["messages"]
    assert reply["parts"][-1]["text"] == "Lyon."
    assert [type(m) for m in api.fake.requests[1].messages] == [UserMessage]  # no "Paris."
    assert await history(api, "s-regen") == out["messages"]
    found = (await api.client.get("/threads", params={"metadata.chat_id": "s-regen"})).json()
    assert found["threads"][0]["metadata"]["title"] == "a city?"  # for a chat list
    thread = (await api.client.get(f"/threads/{found['threads'][0]['id']}")).json()
    assert [m["role"] for m in thread["messages"]] == ["user", "assistant"]
    assert len(thread["runs"]) == 2  # the replaced reply's run is kept, out of the history
    assert (await api.get(thread["runs"][0]))["result"] == "Paris."
    then = await session(api, "s-regen", [{"op": "send", "text": "another?"}],
                         messages=out["messages"])
    assert [type(m) for m in api.fake.requests[2].messages] == [
        UserMessage, AssistantMessage, UserMessage]
    assert api.fake.requests[2].messages[1].content[0].text == "Lyon."  # type: ignore[union-attr]
    assert then["messages"][-1]["parts"][-1]["text"] == "Nice."


async def test_a_refused_message_does_not_poison_the_chat(api: Api) -> None:
    """The page keeps the refused message in its list; the next send works all the same."""
    api.fake.script = [fake.text("Hi.")]
    bad = {"type": "file", "mediaType": "image/png", "url": "javascript:alert(1)"}
    out = await session(api, "s-poison", [{"op": "send", "text": "look", "files": [bad]},
                                          {"op": "send", "text": "hello"}])
    assert len(out["errors"]) == 1 and "messages[0].parts" in out["errors"][0]
    assert not out["errors"][0].startswith("{")  # the message itself, not a JSON body
    assert out["status"] == "ready" and out["messages"][-1]["parts"][-1]["text"] == "Hi."
    assert [m["role"] for m in await history(api, "s-poison")] == ["user", "assistant"]


async def test_regenerate_while_the_reply_runs_or_of_an_older_reply_is_refused(api: Api) -> None:
    api.fake.script = [fake.text("one"), fake.text("two")]
    await session(api, "s-regen-old", [{"op": "send", "text": "1"}, {"op": "send", "text": "2"}])
    first = (await history(api, "s-regen-old"))[1]["id"]
    resp = await api.client.post("/ai-sdk/chat", json={
        "id": "s-regen-old", "trigger": "regenerate-message", "messageId": first,
        "messages": [{"id": "x", "role": "user", "parts": [{"type": "text", "text": "1"}]}]})
    assert resp.status_code == 409 and resp.headers["x-agentloop-error-code"] == "not_last_reply"


async def test_an_approval_beside_a_server_pick_that_runs_after_it_goes_back_by_itself(
        api: Api) -> None:
    """The weather pick runs after the approved one (picks run in the model's order): the
    parked response shows the step without it, so the SDK's check lets the answer go."""
    api.fake.script = [fake.tool_calls(("aisdk_guarded", {"note": "x"}, "g1"),
                                       ("aisdk_weather", {"city": "Oslo"}, "w1")),
                       fake.text("Both done.")]
    out = await session(api, "s-mixed", [{"op": "send", "text": "go"},
                                         {"op": "approve", "approved": True}],
                        body={"tools": ["aisdk_guarded", "aisdk_weather"]})
    assert out["errors"] == [] and len(out["requests"]) == 2
    reply = out["messages"][-1]
    parts = tool_parts(reply)
    assert [p["state"] for p in parts.values()] == ["output-available", "output-available"]
    assert list(parts) == ["g1", "w1"] and reply["parts"][-1]["text"] == "Both done."
    assert out["toolCalls"] == []
    assert await history(api, "s-mixed") == [
        out["messages"][0], {**reply, "parts": [
            {**p, "approval": {"id": "g1"}} if p.get("toolCallId") == "g1" else p
            for p in reply["parts"]]}]


async def test_a_subagents_approval_goes_back_by_itself(api: Api) -> None:
    api.fake.script = [fake.tool_calls(("aisdk_subagent", {"task": "inner"}, "o1")),
                       fake.tool_calls(("aisdk_guarded", {"note": "deep"}, "n1")),
                       fake.text("inner ok"), fake.text("Done.")]
    out = await session(api, "s-nested", [{"op": "send", "text": "delegate"},
                                          {"op": "approve", "approved": True}],
                        body={"tools": ["aisdk_subagent", "aisdk_guarded"]})
    assert out["errors"] == [] and len(out["requests"]) == 2
    parts = tool_parts(out["messages"][-1])
    assert parts["n1"]["state"] == parts["o1"]["state"] == "output-available"
    assert "preliminary" not in parts["o1"]
    assert out["messages"][-1]["parts"][-1]["text"] == "Done."
