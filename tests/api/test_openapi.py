"""The OpenAPI document is a typed contract: named schemas for everything streamed, readable
operationIds, security schemes, error bodies as sent; and what the server really sends (events,
Runs, queues) validates against it."""

from __future__ import annotations

import typing
from typing import Any

import jsonschema_rs

from app.engine.events import Event
from providers import fake
from tests.api.conftest import Api, serve
from tests.support.sse_client import read_all
from tool_registry import function

OPERATIONS = {
    ("post", "/runs"): "createRun", ("get", "/runs"): "listRuns",
    ("get", "/runs/{run_id}"): "getRun", ("get", "/runs/{run_id}/events"): "streamRunEvents",
    ("post", "/runs/{run_id}/steer"): "steerRun",
    ("post", "/runs/{run_id}/follow_up"): "followUpRun",
    ("get", "/runs/{run_id}/queue"): "getRunQueue",
    ("delete", "/runs/{run_id}/queue/{message_id}"): "withdrawQueuedMessage",
    ("post", "/runs/{run_id}/cancel"): "cancelRun", ("get", "/tools"): "listTools",
    ("get", "/healthz"): "getHealth", ("get", "/readyz"): "getReadiness",
    ("get", "/metrics"): "getMetrics",
    ("post", "/threads"): "createThread", ("get", "/threads"): "listThreads",
    ("get", "/threads/{thread_id}"): "getThread",
    ("delete", "/threads/{thread_id}"): "deleteThread",
    ("post", "/threads/{thread_id}/runs"): "createThreadRun",
    ("get", "/threads/{thread_id}/events"): "streamThreadEvents",
    ("post", "/runs/{run_id}/approvals"): "submitApproval",
    ("post", "/runs/{run_id}/tool_results"): "submitToolResult",
    ("post", "/ai-sdk/chat"): "aiSdkChat",
    ("get", "/ai-sdk/chat/{chat_id}/stream"): "aiSdkResumeChat",
    ("get", "/ai-sdk/chat/{chat_id}/messages"): "aiSdkChatMessages",
    ("post", "/ag-ui"): "agUiRunAgent",
    ("get", "/ag-ui/threads/{thread_id}/stream"): "agUiReconnect",
    ("post", "/agents"): "createAgent", ("get", "/agents"): "listAgents",
    ("get", "/agents/{name}"): "getAgent", ("put", "/agents/{name}"): "putAgent",
    ("delete", "/agents/{name}"): "deleteAgent",
    ("get", "/agents/{name}/versions"): "listAgentVersions",
    ("post", "/client_tokens"): "createClientToken", ("get", "/usage"): "getUsage",
    ("get", "/runs/{run_id}/webhooks"): "listRunWebhooks",
}
NAMED = ["Event", "Message", "UserMessage", "AssistantMessage", "ToolResultMessage",
         "UserContent", "AssistantContent", "TextContent", "ImageContent", "ThinkingContent",
         "ToolCall", "Usage", "MessageDelta", "ToolResult", "Run", "RunStatus", "RunStopReason",
         "MessageInput", "UserMessageInput", "ErrorBody"]
EVENT_TYPES = {cls.__dataclass_fields__["type"].default: cls.__name__
               for cls in typing.get_args(Event)}


@function(toolsets=["contract_testing"])
def contract_echo(text: str) -> str:
    """Echoes (test tool)."""
    return text


async def openapi(api: Api) -> dict[str, Any]:
    resp = await api.client.get("/openapi.json")
    assert resp.status_code == 200
    return resp.json()  # type: ignore[no-any-return]


def validator(doc: dict[str, Any], name: str) -> Any:
    """A validator of ``#/components/schemas/<name>`` (formats checked too)."""
    root = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return jsonschema_rs.Draft202012Validator(root, validate_formats=True)


def schema_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return doc["components"]["schemas"][name]  # type: ignore[no-any-return]


async def test_named_schemas_operation_ids_and_security(api_no_worker: Api) -> None:
    doc = await openapi(api_no_worker)
    assert [n for n in NAMED if n not in doc["components"]["schemas"]] == []
    found = {(method, path): op["operationId"] for path, item in doc["paths"].items()
             for method, op in item.items()}
    assert found == OPERATIONS
    event = schema_of(doc, "Event")
    assert event["discriminator"]["propertyName"] == "type"
    mapping = {t: ref.rsplit("/", 1)[1] for t, ref in event["discriminator"]["mapping"].items()}
    assert mapping == EVENT_TYPES
    stream = doc["paths"]["/runs/{run_id}/events"]["get"]
    assert stream["responses"]["200"]["content"]["text/event-stream"]["schema"] == {
        "$ref": "#/components/schemas/Event"}
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "streamToken"}
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert stream["security"] == [{"bearer": []}, {"streamToken": []}]
    assert doc["paths"]["/runs"]["post"]["security"] == [{"bearer": []}]
    assert doc["paths"]["/healthz"]["get"]["security"] == []


async def test_types_formats_and_enums(api_no_worker: Api) -> None:
    doc = await openapi(api_no_worker)
    run = schema_of(doc, "Run")["properties"]
    assert run["created_at"] == {"type": "string", "format": "date-time", "title": "Created At"}
    assert {"type": "string", "format": "date-time"} in run["ended_at"]["anyOf"]
    assert run["status"] == {"$ref": "#/components/schemas/RunStatus"}
    assert schema_of(doc, "RunStatus")["enum"] == ["queued", "running", "requires_action",
                                                   "completed", "failed", "cancelled"]
    assert schema_of(doc, "RunStopReason")["enum"] == ["stop", "max_iterations", "error",
                                                       "aborted", "output_invalid", "budget"]
    assert run["usage"] == {"$ref": "#/components/schemas/Usage"}
    status = next(p for p in doc["paths"]["/runs"]["get"]["parameters"] if p["name"] == "status")
    assert status["schema"] == {"$ref": "#/components/schemas/RunStatus"}
    assert run["messages"]["items"] == {"$ref": "#/components/schemas/Message"}
    end = schema_of(doc, "AgentEnd")
    assert end["properties"]["ts"]["format"] == "date-time"
    assert {"seq", "run_id", "ts", "type", "depth", "stop_reason", "usage"} <= set(
        end["required"])
    assert "parent_tool_call_id" not in end["required"]
    assistant = schema_of(doc, "AssistantMessage")["properties"]
    assert assistant["stop_reason"]["enum"] == ["stop", "length", "tool_use", "error", "aborted"]


def _defaults(node: Any) -> list[Any]:
    if isinstance(node, dict):
        here = [node["default"]] if "default" in node else []
        return here + [d for v in node.values() for d in _defaults(v)]
    if isinstance(node, list):
        return [d for v in node for d in _defaults(v)]
    return []


async def test_defaulted_request_fields_are_optional(api_no_worker: Api) -> None:
    doc = await openapi(api_no_worker)
    create = schema_of(doc, "CreateRun")
    assert create["required"] == ["input"]
    for name in ("CreateRun", "QueueMessageIn", "MessageInput", "UserMessageInput",
                 "AssistantMessageInput", "ToolResultMessageInput", "ToolCallInput"):
        assert _defaults(schema_of(doc, name)) == [], name
    assert "Default: `20`" in create["properties"]["max_iterations"]["description"]
    assert schema_of(doc, "ToolResultMessageInput")["required"] == ["role", "tool_call_id",
                                                                    "tool_name"]
    limit = next(p for p in doc["paths"]["/runs"]["get"]["parameters"] if p["name"] == "limit")
    assert "default" not in limit["schema"] and not limit["required"]


async def test_every_error_response_declares_the_error_body(api_no_worker: Api) -> None:
    doc = await openapi(api_no_worker)
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if int(status) < 400 or op["operationId"] == "getReadiness":
                    continue
                if path.startswith("/ai-sdk/"):  # the SDK shows the body: plain text
                    assert response["content"] == {"text/plain": {"schema": {"type": "string"}}}
                    assert set(response["headers"]) == {"x-agentloop-error-code",
                                                        "x-agentloop-error-field"}
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)


async def test_what_the_server_sends_validates_against_the_schemas() -> None:
    async with serve(worker=True) as api:
        api.fake.script = [
            fake.tool_calls(("contract_echo", {"text": "ping"}), text_before="calling"),
            fake.text("done", thinking="hmm", chunks=2)]
        run = await api.create(input="go", tools=["contract_echo"])
        doc = await openapi(api)
        frames = await read_all(api.client, run["events_url"])
        events = validator(doc, "Event")
        for frame in frames:
            assert list(events.iter_errors(frame.data)) == [], frame.data
        assert {f.event for f in frames} >= {"tool_execution_end", "message_update", "turn_end",
                                             "agent_end", "run_created"}
        runs = validator(doc, "Run")
        ended = await api.get(run["id"])
        assert list(runs.iter_errors(ended)) == [] and ended["status"] == "completed"
        listed = (await api.client.get("/runs")).json()
        assert list(validator(doc, "RunList").iter_errors(listed)) == []
        missing = (await api.client.get("/runs/run_nope")).json()
        assert list(validator(doc, "ErrorBody").iter_errors(missing)) == []
