"""One run pipeline behind every door (issue 28): what ``POST /runs`` checks, a thread post,
``/ai-sdk/chat`` and ``/ag-ui`` check too, each failure a 4xx naming the field in the door's
own names, nothing created, and the keep-alive connection kept. On both backends."""

from __future__ import annotations

import json
import socket
from typing import Any

import orjson
import pytest

from app.dialects.conversation import chat_thread_id
from providers import fake
from tests.api.conftest import Api
from tests.support.errors import api_error

DOORS = ["runs", "thread", "ai_sdk", "ag_ui"]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def nested(depth: int) -> dict[str, Any]:
    """An object schema nested ``depth`` levels deep."""
    node: dict[str, Any] = {"type": "object", "properties": {}}
    top = node
    for _ in range(depth):
        inner: dict[str, Any] = {"type": "object", "properties": {}}
        node["properties"]["a"] = inner
        node = inner
    return top


async def post(api: Api, door: str, chat: str, **options: Any) -> Any:
    """The door's request carrying run options (for AG-UI: client tools as its ``tools``)."""
    if door == "runs":
        return await api.client.post("/runs", json={"input": "hi", **options})
    if door == "thread":
        thread = (await api.client.post("/threads", json={})).json()["id"]
        return await api.client.post(f"/threads/{thread}/runs", json={"input": "hi", **options})
    if door == "ai_sdk":
        return await api.client.post("/ai-sdk/chat", json={
            "id": chat, "messages": [{"id": "u1", "role": "user",
                                      "parts": [{"type": "text", "text": "hi"}]}], **options})
    tools = [{"name": t["name"], "description": t.get("description", ""),
              "parameters": t.get("parameters", SCHEMA)} for t in options.pop("client_tools", [])]
    return await api.client.post("/ag-ui", json={
        "threadId": chat, "runId": "r1", "state": {}, "context": [], "tools": tools,
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        "forwardedProps": {"agentloop": options}})


def field(door: str, name: str) -> str:
    """What the door calls a pipeline field."""
    if door != "ag_ui":
        return name
    if name.startswith("client_tools"):
        return "tools" + name.removeprefix("client_tools")
    return f"forwardedProps.agentloop.{name}"


async def refused(api: Api, door: str, status: int, code: str, name: str,
                  **options: Any) -> None:
    chat = f"chat-{door}-{code}"
    resp = await post(api, door, chat, **options)
    assert resp.status_code == status, resp.text
    error = api_error(resp)
    assert (error["code"], error["field"]) == (code, field(door, name)), error
    assert not (await api.client.get("/runs")).json()["runs"]  # nothing was started
    if door in ("ai_sdk", "ag_ui"):  # nor a thread left behind
        thread = chat_thread_id("default", chat)
        assert (await api.client.get(f"/threads/{thread}")).status_code == 404


@pytest.mark.parametrize("door", DOORS)
async def test_approval_names_are_checked_at_every_door(api: Api, door: str) -> None:
    await refused(api, door, 400, "unknown_tool", "approval[0]", approval=["write_files"])


@pytest.mark.parametrize("door", DOORS)
async def test_a_client_tool_may_not_replace_a_server_tool(api: Api, door: str) -> None:
    await refused(api, door, 400, "invalid_client_tool", "client_tools[0].name",
                  client_tools=[{"name": "read_file", "parameters": SCHEMA}])


@pytest.mark.parametrize("door", DOORS)
async def test_client_tool_names_are_unique(api: Api, door: str) -> None:
    await refused(api, door, 400, "invalid_client_tool", "client_tools[1].name",
                  client_tools=[{"name": "ask", "parameters": SCHEMA},
                                {"name": "ask", "parameters": SCHEMA}])


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(("schema", "name"), [
    ({"type": "string"}, "client_tools[0].parameters"),
    ({"type": "object", "properties": [1]}, "client_tools[0].parameters.properties"),
    ({"type": "object", "required": "q"}, "client_tools[0].parameters.required"),
    ({"type": "object", "properties": {"q": {"type": "text"}}},
     "client_tools[0].parameters.properties.q.type"),
])
async def test_client_tool_schemas_are_object_schemas(api: Api, door: str,
                                                      schema: dict[str, Any], name: str) -> None:
    await refused(api, door, 422, "validation_error", name,
                  client_tools=[{"name": "ask", "parameters": schema}])


@pytest.mark.parametrize("door", DOORS)
async def test_a_forced_tool_choice_may_name_a_client_tool(api: Api, door: str) -> None:
    api.fake.script = [fake.text("ok")]
    resp = await post(api, door, f"chat-forced-{door}",
                      client_tools=[{"name": "ask", "parameters": SCHEMA}],
                      tool_choice={"type": "function", "name": "ask"})
    assert resp.status_code in (200, 201), resp.text


@pytest.mark.parametrize("door", DOORS)
async def test_metadata_is_bounded_at_every_door(api: Api, door: str) -> None:
    await refused(api, door, 422, "validation_error", "metadata",
                  metadata={f"k{i}": "v" for i in range(65)})
    await refused(api, door, 422, "validation_error", "metadata",
                  metadata={"k": "v" * 513})


async def test_thread_metadata_is_bounded_and_lists_are_summaries(api: Api) -> None:
    for metadata in ({f"k{i}": "v" for i in range(60_000)}, {"k": "v" * 600_000},
                     {"": "empty key"}, {"k" * 65: "v"}):
        resp = await api.client.post("/threads", json={"metadata": metadata})
        assert resp.status_code in (413, 422), resp.text[:200]
        if resp.status_code == 422:
            assert api_error(resp)["field"] == "metadata"
    fine = {f"k{i}": "v" * 512 for i in range(64)}
    thread = (await api.client.post("/threads", json={"metadata": fine})).json()
    assert thread["metadata"] == fine
    listed = (await api.client.get("/threads")).json()["threads"]
    assert [t["id"] for t in listed] == [thread["id"]]
    assert "messages" not in listed[0] and "runs" not in listed[0]
    assert listed[0]["run_count"] == 0 and listed[0]["last_run"] is None
    full = (await api.client.get(f"/threads/{thread['id']}")).json()
    assert full["messages"] == [] and full["runs"] == []


def _two_requests_on_one_connection(url: str, first: bytes, second: bytes
                                    ) -> list[tuple[int, bytes]]:
    """Send ``first``, read its answer, then ``second`` on the same TCP connection."""
    host, port = url.removeprefix("http://").split(":")
    answers = []
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        reader = sock.makefile("rb")
        for request in (first, second):
            sock.sendall(request)
            status = int(reader.readline().split()[1])
            length, closing = 0, False
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
                if name.lower() == "connection" and "close" in value.lower():
                    closing = True
            answers.append((status, reader.read(length)))
            assert not closing, "the server closed the keep-alive connection"
    return answers


def _raw_post(path: str, body: Any) -> bytes:
    data = json.dumps(body).encode()  # orjson writes 254 levels at most
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def _ag_ui(thread: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    tools = [{"description": "", **t} for t in tools]
    return {"threadId": thread, "runId": "r1", "state": {}, "context": [], "tools": tools,
            "messages": [{"id": "u1", "role": "user", "content": "hi"}], "forwardedProps": {}}


def _ui_answer(output: Any) -> dict[str, Any]:
    return {"id": "c-deep", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        {"id": "a1", "role": "assistant", "parts": [
            {"type": "tool-ask", "toolCallId": "c1", "state": "output-available",
             "input": {}, "output": output}]}]}


@pytest.mark.parametrize(("path", "body", "name"), [
    ("/ag-ui", _ag_ui("t-bad", [{"name": "bad name!", "parameters": SCHEMA}]),
     "tools[0].name"),
    ("/ag-ui", _ag_ui("t-long", [{"name": "a" * 65, "parameters": SCHEMA}]), "tools[0].name"),
    ("/ag-ui", _ag_ui("t-list", [{"name": "ok", "parameters": [1]}]), "tools[0].parameters"),
    ("/ag-ui", _ag_ui("t-deep", [{"name": "ok", "parameters": nested(300)}]),
     "tools[0].parameters.properties"),
    ("/ai-sdk/chat", _ui_answer(nested(300)), "messages[1].parts[0]"),
    ("/runs", {"input": "hi", "client_tools": [{"name": "ok", "parameters": nested(200)}]},
     "client_tools[0].parameters"),
    ("/ai-sdk/chat", {"id": "c-tools", "client_tools": [{"name": "ok",
                                                         "parameters": nested(200)}],
                      "messages": [{"id": "u1", "role": "user",
                                    "parts": [{"type": "text", "text": "hi"}]}]},
     "client_tools[0].parameters"),
])
async def test_malformed_dialect_payloads_are_4xx_and_keep_the_connection(
        api: Api, path: str, body: dict[str, Any], name: str) -> None:
    (status, raw), (again, _) = _two_requests_on_one_connection(
        api.url, _raw_post(path, body), b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
    assert 400 <= status < 500, raw[:300]
    text = raw.decode() if path.startswith("/ai-sdk/") else orjson.loads(raw)["error"]["field"]
    assert text.startswith(name), raw[:300]  # the AI SDK's errors: the message, plain text
    assert again == 200
    assert not (await api.client.get("/threads")).json()["threads"]  # no thread left behind


async def _parked_chat(api: Api, chat: str, post_first: Any) -> str:
    """The id of the chat's run once it waits for the client tool ``ask`` (call ``c1``)."""
    api.fake.script = [fake.tool_calls(("ask", {"q": "x"}, "c1")), fake.text("thanks")]
    assert (await post_first()).status_code == 200
    runs = (await api.client.get("/runs", params={"metadata.chat_id": chat})).json()["runs"]
    await api.wait_status(runs[0]["id"], "requires_action")
    return str(runs[0]["id"])


async def _still_waiting(api: Api, run_id: str) -> None:
    run = await api.get(run_id)
    assert run["status"] == "requires_action" and run["pending"][0]["decided"] is False


async def test_ai_sdk_answers_of_one_message_are_taken_all_or_none(api: Api) -> None:
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    tools = [{"name": "ask", "parameters": SCHEMA}]
    run_id = await _parked_chat(api, "c-answers", lambda: api.client.post("/ai-sdk/chat", json={
        "id": "c-answers", "client_tools": tools, "messages": [user]}))
    part = {"type": "tool-ask", "toolCallId": "c1", "state": "output-available",
            "input": {"q": "x"}, "output": "42"}

    def answer(*parts: dict[str, Any]) -> Any:
        return api.client.post("/ai-sdk/chat", json={"id": "c-answers", "messages": [
            user, {"id": "a1", "role": "assistant", "parts": list(parts)}]})

    twice = await answer(part, {**part, "output": "43"})
    assert twice.status_code == 422, twice.text
    assert api_error(twice)["field"] == "messages[1].parts[1]"
    await _still_waiting(api, run_id)
    assert (await answer(part)).status_code == 200
    done = await api.wait_status(run_id, "completed")
    assert done["result"] == "thanks"


async def test_ag_ui_answers_of_one_input_are_taken_all_or_none(api: Api) -> None:
    user = {"id": "u1", "role": "user", "content": "hi"}
    tools = [{"name": "ask", "description": "", "parameters": SCHEMA}]

    def run_agent(*messages: dict[str, Any]) -> Any:
        return api.client.post("/ag-ui", json={
            "threadId": "t-answers", "runId": "r1", "state": {}, "context": [], "tools": tools,
            "messages": list(messages), "forwardedProps": {}})

    run_id = await _parked_chat(api, "t-answers", lambda: run_agent(user))
    call = {"id": "a1", "role": "assistant", "toolCalls": [
        {"id": "c1", "type": "function", "function": {"name": "ask", "arguments": "{}"}}]}
    result = {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "42"}
    twice = await run_agent(user, call, result, {**result, "id": "t2", "content": "43"})
    assert twice.status_code == 422, twice.text
    assert api_error(twice)["field"] == "messages[3]"
    await _still_waiting(api, run_id)
    assert (await run_agent(user, call, result)).status_code == 200
    done = await api.wait_status(run_id, "completed")
    assert done["result"] == "thanks"
