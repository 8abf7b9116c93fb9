"""Attachments at every door, on both backends: images by URL and documents reach the model as
the neutral blocks; what a model cannot take, a malformed block and an oversized one are 4xx
naming the field in the door's own names (and the model), nothing created; a thread's history
keeps the blocks as they were posted."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from providers import fake
from providers.attachments import Accepts
from providers.messages import DocumentContent, ImageContent, TextContent, UserMessage
from tests.api.conftest import Api, serve
from tests.support.errors import api_error

DOORS = ["runs", "thread", "ai_sdk", "ag_ui"]
PDF = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()
IMAGE_URL = "https://images.example.com/cat.png"
TEXT_ONLY = Accepts(images=False, urls=False, documents=frozenset())


def pdf(**extra: Any) -> dict[str, Any]:
    return {"type": "document", "data": PDF, "mime_type": "application/pdf", "name": "r.pdf",
            **extra}


def _ai_sdk_part(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return block
    url = block.get("url") or f"data:{block['mime_type']};base64,{block.get('data', '')}"
    part = {"type": "file", "url": url, "mediaType": block.get("mime_type", "image/png")}
    return {**part, "filename": block["name"]} if "name" in block else part


def _ag_ui_part(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return block
    source = ({"type": "url", "value": block["url"]} if "url" in block
              else {"type": "data", "value": block.get("data", "")})
    if "mime_type" in block:
        source["mimeType"] = block["mime_type"]
    part = {"type": block["type"], "source": source}
    return {**part, "metadata": {"filename": block["name"]}} if "name" in block else part


async def post(api: Api, door: str, chat: str, blocks: list[dict[str, Any]]) -> Any:
    """The door's request posting one user message holding ``blocks`` (ours, translated)."""
    message = [{"role": "user", "content": blocks}]
    if door == "runs":
        return await api.client.post("/runs", json={"input": message})
    if door == "thread":
        thread = (await api.client.post("/threads", json={})).json()["id"]
        return await api.client.post(f"/threads/{thread}/runs", json={"input": message})
    if door == "ai_sdk":
        return await api.client.post("/ai-sdk/chat", json={"id": chat, "messages": [
            {"id": "u1", "role": "user", "parts": [_ai_sdk_part(b) for b in blocks]}]})
    return await api.client.post("/ag-ui", json={
        "threadId": chat, "runId": "r1", "state": {}, "context": [], "tools": [],
        "forwardedProps": {}, "messages": [
            {"id": "u1", "role": "user", "content": [_ag_ui_part(b) for b in blocks]}]})


def field(door: str, index: int, sub: str = "") -> str:
    """What the door calls block ``index`` of the posted message (and its field ``sub``)."""
    if door == "ai_sdk":
        names = {"": "", ".url": ".url", ".data": ".url", ".mime_type": ".mediaType"}
        return f"messages[0].parts[{index}]{names[sub]}"
    if door == "ag_ui":
        names = {"": "", ".url": ".source.value", ".data": ".source.value",
                 ".mime_type": ".source.mimeType"}
        return f"messages[0].content[{index}]{names[sub]}"
    return f"input[0].content[{index}]{sub}"


async def refused(api: Api, door: str, blocks: list[dict[str, Any]], status: int, code: str,
                  name: str) -> str:
    resp = await post(api, door, f"chat-{door}-{code}", blocks)
    assert resp.status_code == status, resp.text
    error = api_error(resp)
    assert (error["code"], error["field"]) == (code, name), error
    assert not (await api.client.get("/runs")).json()["runs"]  # nothing was started
    return str(error["message"])


LOOK = {"type": "text", "text": "look"}


@pytest.mark.parametrize("door", DOORS)
async def test_a_document_to_a_model_without_document_input_is_400(api: Api,
                                                                   door: str) -> None:
    api.fake.accepts = TEXT_ONLY
    message = await refused(api, door, [LOOK, pdf()], 400, "unsupported_attachment",
                            field(door, 1))
    assert "model 'fake:test' cannot take application/pdf documents" in message


@pytest.mark.parametrize("door", DOORS)
async def test_a_url_to_a_model_without_urls_is_400(api: Api, door: str) -> None:
    api.fake.accepts = Accepts(images=True, urls=False)
    message = await refused(api, door, [LOOK, {"type": "image", "url": IMAGE_URL,
                                               "mime_type": "image/png"}],
                            400, "unsupported_attachment", field(door, 1, ".url"))
    assert "'fake:test'" in message and "by URL" in message


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize(("block", "sub"), [
    ({"type": "image", "url": "http://images.example.com/a.png"}, ".url"),
    ({"type": "image", "url": "https://127.0.0.1/a.png"}, ".url"),
    ({"type": "image", "url": "https://localhost/a.png"}, ".url"),
    ({"type": "document", "url": "https://169.254.169.254/a.pdf",
      "mime_type": "application/pdf"}, ".url"),
    ({"type": "document", "data": PDF, "mime_type": "application/zip"}, ".mime_type"),
    ({"type": "document", "data": base64.b64encode(b"\xff\xfe").decode(),
      "mime_type": "text/plain"}, ".data"),
    ({"type": "image", "data": "@@", "mime_type": "image/png"}, ".data"),
    ({"type": "image", "data": PDF, "mime_type": "image/bmp"}, ".mime_type"),
])
async def test_malformed_attachments_are_422(api: Api, door: str, block: dict[str, Any],
                                             sub: str) -> None:
    await refused(api, door, [LOOK, block], 422, "validation_error", field(door, 1, sub))


@pytest.mark.parametrize("door", ["runs", "thread"])
async def test_credentials_and_two_sources_are_422(api: Api, door: str) -> None:
    await refused(api, door, [LOOK, {"type": "image", "url": "https://u:p@example.com/a.png"}],
                  422, "validation_error", field(door, 1, ".url"))
    await refused(api, door, [LOOK, pdf(url="https://example.com/a.pdf")], 422,
                  "validation_error", field(door, 1))


@pytest.fixture(params=["memory", "redis"])
async def small(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    """The server with 64-byte attachments, 100 bytes a request, on each backend."""
    backend = None
    if request.param == "redis":
        from app.store import make_backend

        backend = make_backend(request.getfixturevalue("redis_url"), lease=5.0, run_ttl=3600)
    async with serve(backend=backend, attachment_max_bytes=64,
                     attachment_request_max_bytes=100) as running:
        yield running


@pytest.mark.parametrize("door", DOORS)
async def test_size_limits_are_413(small: Api, door: str) -> None:
    big = base64.b64encode(b"%PDF" + b"x" * 61).decode()
    ok = base64.b64encode(b"%PDF" + b"x" * 56).decode()  # 60 bytes: two of them pass 100
    await refused(small, door, [LOOK, pdf(data=big)], 413, "attachment_too_large",
                  field(door, 1))
    message = await refused(small, door, [LOOK, pdf(data=ok), pdf(data=ok)], 413,
                            "attachment_too_large", field(door, 2))
    assert "AGENTLOOP_ATTACHMENT_REQUEST_MAX_BYTES" in message


@pytest.mark.parametrize("door", DOORS)
async def test_attachments_reach_the_model(api: Api, door: str) -> None:
    api.fake.script = [fake.text("seen")]
    notes = base64.b64encode("# Notes ✓".encode()).decode()
    blocks = [LOOK, {"type": "image", "url": IMAGE_URL, "mime_type": "image/png"}, pdf(),
              {"type": "document", "data": notes, "mime_type": "text/markdown",
               "name": "n.md"}]
    resp = await post(api, door, f"chat-ok-{door}", blocks)
    assert resp.status_code in (200, 201, 202), resp.text
    run_id = (await api.client.get("/runs")).json()["runs"][0]["id"]
    await api.wait_status(run_id, "completed")
    sent = api.fake.requests[0].messages[-1]
    assert isinstance(sent, UserMessage) and sent.content == [
        TextContent(text="look"), ImageContent(url=IMAGE_URL, mime_type="image/png"),
        DocumentContent(data=PDF, mime_type="application/pdf", name="r.pdf"),
        DocumentContent(data=notes, mime_type="text/markdown", name="n.md")]


async def test_a_steer_is_checked_against_the_runs_model(api: Api) -> None:
    api.fake.accepts = TEXT_ONLY
    api.fake.script = [fake.hanging()]
    run = await api.create()
    resp = await api.client.post(f"/runs/{run['id']}/steer", json={"content": [LOOK, pdf()]})
    assert resp.status_code == 400, resp.text
    assert api_error(resp)["field"] == "content[1]"
    assert "'fake:test'" in api_error(resp)["message"]
    await api.client.post(f"/runs/{run['id']}/cancel")


async def test_a_threads_history_keeps_the_blocks(api: Api) -> None:
    api.fake.script = [fake.text("one"), fake.text("two")]
    blocks = [LOOK, {"type": "image", "url": IMAGE_URL}, pdf()]
    thread = (await api.client.post("/threads", json={})).json()["id"]
    first = await api.client.post(f"/threads/{thread}/runs",
                                  json={"input": [{"role": "user", "content": blocks}]})
    await api.wait_status(first.json()["id"], "completed")
    second = await api.client.post(f"/threads/{thread}/runs", json={"input": "and now?"})
    await api.wait_status(second.json()["id"], "completed")
    stored = (await api.client.get(f"/threads/{thread}")).json()["messages"]
    assert stored[0]["content"] == blocks
    replayed = api.fake.requests[1].messages[0]
    assert isinstance(replayed, UserMessage) and replayed.content == [
        TextContent(text="look"), ImageContent(url=IMAGE_URL),
        DocumentContent(data=PDF, mime_type="application/pdf", name="r.pdf")]


async def test_a_client_tool_results_images_are_checked_too(api: Api) -> None:
    api.fake.script = [fake.hanging()]
    run = await api.create()
    url = f"/runs/{run['id']}/tool_results"
    for image, name in (({"type": "image", "url": "http://example.com/a.png"}, "content[0].url"),
                        ({"type": "image", "data": "@@", "mime_type": "image/png"},
                         "content[0].data")):
        resp = await api.client.post(url, json={"tool_call_id": "c1", "content": [image]})
        assert resp.status_code == 422 and api_error(resp)["field"] == name, resp.text
    await api.client.post(f"/runs/{run['id']}/cancel")
