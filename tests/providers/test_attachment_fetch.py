"""Fetching attachments under the SSRF guard, against a real https server on loopback.

Without ``public_localhost`` the guard is the production one: the loopback host is refused
before anything is sent to it. With it, the host stands in for a public site and the rest is
checked: the size cap, each redirect hop (address and scheme), the media type served, the
status, credentials in the URL; and a URL is fetched once for the calls of a run."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from providers.attachment_fetch import AttachmentError, AttachmentFetcher
from providers.base import ModelRequest
from providers.events import ErrorEvent
from providers.messages import DocumentContent, ImageContent, TextContent, UserMessage
from tests.providers.attachment_support import (
    B64,
    PNG,
    host_url,
    send,
    served,
    trusting_client,
)
from tests.support.wire_server import WireServer


async def inline(tls: Any, block: ImageContent | DocumentContent,
                 **options: Any) -> ImageContent | DocumentContent:
    async with trusting_client(tls) as client:
        return await AttachmentFetcher(client=client, **options).inline(block)


async def test_a_loopback_url_is_refused_in_production(host: WireServer, tls: Any) -> None:
    with pytest.raises(AttachmentError, match=r"resolves to .*, a loopback address"):
        await inline(tls, ImageContent(url=host_url(host, "/cat.png")))
    assert host.requests == []


async def test_the_refusal_ends_the_model_call_naming_the_url(server: WireServer,
                                                              host: WireServer) -> None:
    url = host_url(host, "/cat.png")
    request = ModelRequest(model="m", messages=[UserMessage(content=[
        TextContent(text="look"), ImageContent(url=url)])])
    events = await send("gemini", server, request, AttachmentFetcher())
    error = events[-1]
    assert isinstance(error, ErrorEvent) and not error.retryable
    assert url in error.error_message and "loopback" in error.error_message
    assert server.requests == [] and host.requests == []
    server.replies.clear()


async def test_the_test_host_is_fetched_when_allowed(host: WireServer, tls: Any,
                                                     public_localhost: None) -> None:
    host.replies.append(served(PNG, "image/png"))
    image = await inline(tls, ImageContent(url=host_url(host, "/cat.png")))
    assert image == ImageContent(data=B64["png"], mime_type="image/png")
    assert host.requests[0].headers["user-agent"].startswith("agentloop-attachments/")


async def test_private_addresses_may_be_allowed_but_never_metadata(tls: Any) -> None:
    with pytest.raises(AttachmentError, match="metadata"):
        await inline(tls, ImageContent(url="https://169.254.169.254/latest/x.png"),
                     allow_private=True)


async def test_the_size_is_capped(host: WireServer, tls: Any, public_localhost: None) -> None:
    host.replies.append(served(PNG, "image/png"))
    with pytest.raises(AttachmentError, match="larger than 16 bytes"):
        await inline(tls, ImageContent(url=host_url(host, "/big.png")), max_bytes=16)


@pytest.mark.parametrize(("target", "why"), [
    ("https://10.0.0.1/x.png", "10.0.0.1, a private address"),
    ("https://[::ffff:169.254.169.254]/x.png", "metadata"),
    ("https://127.0.0.2/x.png", "loopback"),
])
async def test_a_redirect_to_a_private_address_is_refused(target: str, why: str,
                                                          host: WireServer, tls: Any,
                                                          public_localhost: None) -> None:
    host.replies.append(served(b"", "text/plain", 302, location=target))
    with pytest.raises(AttachmentError, match=why.replace(".", r"\.")):
        await inline(tls, ImageContent(url=host_url(host, "/moved.png")))
    assert [r.path for r in host.requests] == ["/moved.png"]


async def test_a_redirect_to_plain_http_is_refused(host: WireServer, tls: Any,
                                                   public_localhost: None) -> None:
    host.replies.append(served(b"", "text/plain", 301,
                               location=f"http://localhost:{host.port}/cat.png"))
    with pytest.raises(AttachmentError, match="only https URLs"):
        await inline(tls, ImageContent(url=host_url(host, "/moved.png")))
    assert len(host.requests) == 1


async def test_a_redirect_on_the_same_host_is_followed(host: WireServer, tls: Any,
                                                       public_localhost: None) -> None:
    host.replies += [served(b"", "text/plain", 302, location="/final.png"),
                     served(PNG, "image/png")]
    image = await inline(tls, ImageContent(url=host_url(host, "/moved.png")))
    assert image.data == B64["png"]
    assert [r.path for r in host.requests] == ["/moved.png", "/final.png"]


@pytest.mark.parametrize(("block", "content_type", "why"), [
    (ImageContent(url="/cat.png"), "text/html", "not an image"),
    (ImageContent(url="/cat.png"), "application/octet-stream", "not an image"),
    (DocumentContent(url="/a.pdf", mime_type="application/pdf"), "text/html",
     "not the document's 'application/pdf'"),
    (DocumentContent(url="/a.csv", mime_type="text/csv"), "image/png", "not the document's"),
])
async def test_the_media_type_served_must_fit_the_block(block: Any, content_type: str, why: str,
                                                        host: WireServer, tls: Any,
                                                        public_localhost: None) -> None:
    host.replies.append(served(b"<html>login</html>", content_type))
    with pytest.raises(AttachmentError, match=why):
        await inline(tls, dataclasses.replace(block, url=host_url(host, block.url)))


async def test_an_untyped_answer_takes_the_blocks_own_type(host: WireServer, tls: Any,
                                                           public_localhost: None) -> None:
    host.replies.append(served(PNG, "application/octet-stream"))
    image = await inline(tls, ImageContent(url=host_url(host, "/x"), mime_type="image/png"))
    assert image.mime_type == "image/png"


async def test_an_error_status_is_refused(host: WireServer, tls: Any,
                                          public_localhost: None) -> None:
    host.replies.append(served(b"gone", "text/plain", 404))
    with pytest.raises(AttachmentError, match="answered HTTP 404"):
        await inline(tls, ImageContent(url=host_url(host, "/gone.png")))


async def test_credentials_in_the_url_are_refused_and_not_repeated(host: WireServer,
                                                                   tls: Any) -> None:
    url = f"https://user:s3cret@localhost:{host.port}/cat.png"
    with pytest.raises(AttachmentError, match="credentials") as caught:
        await inline(tls, ImageContent(url=url))
    assert "s3cret" not in str(caught.value) and host.requests == []


async def test_the_calls_of_a_run_fetch_a_url_once(host: WireServer, tls: Any,
                                                   public_localhost: None) -> None:
    host.replies.append(served(PNG, "image/png"))
    url = host_url(host, "/cat.png")
    async with trusting_client(tls) as client:
        fetcher = AttachmentFetcher(client=client)
        first = await fetcher.inline(ImageContent(url=url))
        again = await fetcher.inline(ImageContent(url=url))
    assert first == again and len(host.requests) == 1


async def test_the_cache_is_bounded(host: WireServer, tls: Any,
                                    public_localhost: None) -> None:
    host.replies += [served(PNG, "image/png"), served(PNG, "image/png")]
    url = host_url(host, "/cat.png")
    async with trusting_client(tls) as client:
        fetcher = AttachmentFetcher(client=client, cache_bytes=len(PNG) - 1)
        await fetcher.inline(ImageContent(url=url))
        await fetcher.inline(ImageContent(url=url))
    assert len(host.requests) == 2
