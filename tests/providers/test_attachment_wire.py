"""What reaches each provider's wire for an image URL, a PDF and a text document: passed on
where the provider fetches URLs itself, fetched from the (https, loopback) attachment host and
sent inline where it does not, and a kind a provider cannot take replaced by a note."""

from __future__ import annotations

from typing import Any

import pytest

from providers.attachment_fetch import AttachmentFetcher
from providers.base import ModelRequest
from providers.demo import DemoProvider
from providers.events import TextDelta
from providers.messages import (
    AssistantMessage,
    DocumentContent,
    ImageContent,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.providers.attachment_support import (
    B64,
    KINDS,
    NOTES,
    PDF_BYTES,
    PNG,
    host_url,
    send,
    served,
    trusting_client,
    user_content,
)
from tests.support.wire_server import WireServer

PDF_DATA_URL = f"data:application/pdf;base64,{B64['pdf']}"
PNG_DATA_URL = f"data:image/png;base64,{B64['png']}"
NOTES_PART = f'<document name="notes.md" media_type="text/markdown">\n{NOTES}\n</document>'


def inline_request(image_url: str) -> ModelRequest:
    """An image by URL, a PDF and a markdown document as data."""
    return ModelRequest(model="m", messages=[UserMessage(content=[
        TextContent(text="look"), ImageContent(url=image_url),
        DocumentContent(data=B64["pdf"], mime_type="application/pdf", name="report.pdf"),
        DocumentContent(data=B64["notes"], mime_type="text/markdown", name="notes.md")])])


def expected_inline(kind: str, image_url: str) -> list[Any]:
    """What ``kind``'s wire holds for ``inline_request``."""
    return {
        "anthropic": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "url", "url": image_url}},
            {"type": "document", "title": "report.pdf", "source": {
                "type": "base64", "media_type": "application/pdf", "data": B64["pdf"]}},
            {"type": "document", "title": "notes.md", "source": {
                "type": "text", "media_type": "text/plain", "data": NOTES}}],
        "openai": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": image_url}},
            {"type": "file", "file": {"filename": "report.pdf", "file_data": PDF_DATA_URL}},
            {"type": "text", "text": NOTES_PART}],
        "compatible": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": PNG_DATA_URL}},
            {"type": "text", "text": "[document report.pdf (application/pdf) left out: this "
                                     "model cannot read it]"},
            {"type": "text", "text": NOTES_PART}],
        "responses": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": image_url},
            {"type": "input_file", "filename": "report.pdf", "file_data": PDF_DATA_URL},
            {"type": "input_file", "filename": "notes.md",
             "file_data": f"data:text/markdown;base64,{B64['notes']}"}],
        "gemini": [
            {"text": "look"},
            {"inlineData": {"mimeType": "image/png", "data": B64["png"]}},
            {"inlineData": {"mimeType": "application/pdf", "data": B64["pdf"]}},
            {"inlineData": {"mimeType": "text/plain", "data": B64["notes"]}}],
        "bedrock": [
            {"text": "look"},
            {"image": {"format": "png", "source": {"bytes": B64["png"]}}},
            {"document": {"format": "pdf", "name": "report", "source": {"bytes": B64["pdf"]}}},
            {"document": {"format": "md", "name": "notes", "source": {"bytes": B64["notes"]}}}],
    }[kind]


FETCHES_IMAGES = {"compatible", "gemini", "bedrock"}


@pytest.mark.parametrize("kind", KINDS)
async def test_an_image_url_a_pdf_and_a_text_document(kind: str, server: WireServer,
                                                      host: WireServer, tls: Any,
                                                      public_localhost: None) -> None:
    image_url = host_url(host, "/cat.png")
    host.replies.append(served(PNG, "image/png"))
    async with trusting_client(tls) as client:
        await send(kind, server, inline_request(image_url), AttachmentFetcher(client=client))
    assert user_content(kind, server.requests[0].json) == expected_inline(kind, image_url)
    fetched = [r.path for r in host.requests]
    assert fetched == (["/cat.png"] if kind in FETCHES_IMAGES else [])
    if fetched:
        assert host.requests[0].headers["host"] == f"localhost:{host.port}"


def url_request(host: WireServer) -> ModelRequest:
    """A PDF and a CSV document, both by URL."""
    return ModelRequest(model="m", messages=[UserMessage(content=[
        TextContent(text="read"),
        DocumentContent(url=host_url(host, "/files/report.pdf"), mime_type="application/pdf"),
        DocumentContent(url=host_url(host, "/t.csv"), mime_type="text/csv", name="t.csv")])])


@pytest.mark.parametrize("kind", ["anthropic", "openai", "responses", "gemini", "bedrock"])
async def test_documents_by_url(kind: str, server: WireServer, host: WireServer, tls: Any,
                                public_localhost: None) -> None:
    """Anthropic takes a PDF's URL, the Responses API any file's; the rest are fetched."""
    pdf_url, csv_url = host_url(host, "/files/report.pdf"), host_url(host, "/t.csv")
    fetched = {"anthropic": ["/t.csv"], "responses": []}.get(kind, ["/files/report.pdf",
                                                                     "/t.csv"])
    replies = {"/files/report.pdf": served(PDF_BYTES, "application/octet-stream"),
               "/t.csv": served(b"a,b\n1,2\n", "text/plain; charset=utf-8")}
    host.replies += [replies[path] for path in fetched]
    async with trusting_client(tls) as client:
        await send(kind, server, url_request(host), AttachmentFetcher(client=client))
    content = user_content(kind, server.requests[0].json)
    csv_b64 = "YSxiCjEsMgo="
    expected = {
        "anthropic": [{"type": "document", "source": {"type": "url", "url": pdf_url}},
                      {"type": "document", "title": "t.csv", "source": {
                          "type": "text", "media_type": "text/plain", "data": "a,b\n1,2\n"}}],
        "openai": [{"type": "file", "file": {"filename": "report.pdf",
                                             "file_data": PDF_DATA_URL}},
                   {"type": "text", "text": '<document name="t.csv" media_type="text/csv">\n'
                                            'a,b\n1,2\n\n</document>'}],
        "responses": [{"type": "input_file", "filename": "document.pdf", "file_url": pdf_url},
                      {"type": "input_file", "filename": "t.csv", "file_url": csv_url}],
        "gemini": [{"inlineData": {"mimeType": "application/pdf", "data": B64["pdf"]}},
                   {"inlineData": {"mimeType": "text/csv", "data": csv_b64}}],
        "bedrock": [{"document": {"format": "pdf", "name": "report",
                                  "source": {"bytes": B64["pdf"]}}},
                    {"document": {"format": "csv", "name": "t", "source": {"bytes": csv_b64}}}],
    }[kind]
    assert content[1:] == expected
    assert [r.path for r in host.requests] == fetched


@pytest.mark.parametrize("kind", ["gemini", "bedrock", "compatible"])
async def test_an_image_url_in_a_tool_result_is_fetched_too(kind: str, server: WireServer,
                                                            host: WireServer, tls: Any,
                                                            public_localhost: None) -> None:
    host.replies.append(served(PNG, "image/png"))
    request = ModelRequest(model="m", messages=[
        UserMessage(content="draw"),
        AssistantMessage(content=[ToolCall(id="c1", name="draw", arguments={})]),
        ToolResultMessage(tool_call_id="c1", tool_name="draw",
                          content=[ImageContent(url=host_url(host, "/out.png"))])])
    async with trusting_client(tls) as client:
        await send(kind, server, request, AttachmentFetcher(client=client))
    assert [r.path for r in host.requests] == ["/out.png"]
    assert B64["png"] in server.requests[0].body.decode()


async def test_bedrock_names_documents_uniquely_and_adds_the_text_it_requires(
        server: WireServer) -> None:
    request = ModelRequest(model="m", messages=[UserMessage(content=[
        DocumentContent(data=B64["pdf"], mime_type="application/pdf", name="Q3: report.v2.pdf"),
        DocumentContent(data=B64["pdf"], mime_type="application/pdf", name="Q3  report v2"),
        DocumentContent(data=B64["notes"], mime_type="text/markdown", name="../../etc/passwd"),
    ])])
    await send("bedrock", server, request, AttachmentFetcher())
    content = user_content("bedrock", server.requests[0].json)
    assert [b["document"]["name"] for b in content[:3]] == [
        "Q3 report v2", "Q3 report v2 (2)", "passwd"]
    assert content[3] == {"text": "(the attached documents)"}


@pytest.mark.parametrize("kind", ["anthropic", "gemini", "openai"])
async def test_an_office_file_in_a_replayed_history_becomes_a_note(kind: str,
                                                                   server: WireServer) -> None:
    """A thread may replay a .docx a Bedrock run took to a model that reads none."""
    docx = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    request = ModelRequest(model="m", messages=[UserMessage(content=[
        TextContent(text="summarise"), DocumentContent(data="UEsDBA==", mime_type=docx,
                                                       name="plan.docx")])])
    await send(kind, server, request, AttachmentFetcher())
    note = user_content(kind, server.requests[0].json)[1]
    assert f"[document plan.docx ({docx}) left out:" in str(note)


async def test_the_demo_model_says_what_it_got() -> None:
    request = ModelRequest(model="echo", messages=[UserMessage(content=[
        TextContent(text="look"), ImageContent(url="https://example.com/cat.png"),
        DocumentContent(data=B64["pdf"], mime_type="application/pdf", name="report.pdf")])])
    reply = "".join(e.delta for e in [e async for e in DemoProvider().stream(request)]
                    if isinstance(e, TextDelta))
    assert ("Attached: image (type unknown, at https://example.com/cat.png); document "
            f"'report.pdf' (application/pdf, {len(PDF_BYTES)} bytes).") in reply
