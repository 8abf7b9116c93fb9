"""Fetching an attachment given by URL, for an adapter whose provider does not take URLs.

``AttachmentFetcher.inline(block)`` GETs the block's ``https://`` URL under the SSRF guard of
``providers.safe_fetch`` (every resolved address checked, the connection pinned to it, each
redirect hop checked and kept to ``https``; ``allow_private`` lifts the address check except
for cloud metadata addresses) and returns the block with its bytes inline:

- the body is read up to ``max_bytes`` (``AGENTLOOP_ATTACHMENT_MAX_BYTES``): a larger one is
  refused, as is an answer other than ``200``, a URL with credentials in it, and a whole fetch
  taking longer than ``timeout`` seconds;
- the media type served must fit the block: an image must be served as one of
  ``IMAGE_TYPES``; a document as its own ``mime_type`` (a text document as any ``text/*``);
  ``application/octet-stream`` or none at all stands for the block's own type when it has one;
- what was fetched is kept ``cache_seconds`` (at most ``cache_bytes`` in all, oldest dropped
  first), so the model calls of one run, which each send the whole history, fetch a URL once.

Failures raise ``AttachmentError`` naming the URL and the reason; the adapter's stream turns
it into the model call's ``error`` event.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
from collections import OrderedDict
from dataclasses import dataclass

import httpx

from providers import safe_fetch
from providers.attachments import IMAGE_TYPES, TEXT_TYPES, decoded_size
from providers.messages import Attachment, DocumentContent, ImageContent

MiB = 1024 * 1024
USER_AGENT = "agentloop-attachments/0.1"
_UNTYPED = frozenset({"", "application/octet-stream", "binary/octet-stream"})


class AttachmentError(ValueError):
    """An attachment's URL could not be fetched or is not what the block says it is."""


@dataclass(frozen=True, slots=True)
class _Cached:
    expires: float
    media_type: str
    data: str


class AttachmentFetcher:
    """Fetches attachments by URL under the SSRF guard (see the module docstring).

    ``client`` must use no proxy (``trust_env=False``); without one each fetch opens a
    short-lived client of its own."""

    def __init__(self, *, max_bytes: int = 10 * MiB, timeout: float = 20.0,
                 allow_private: bool = False, client: httpx.AsyncClient | None = None,
                 cache_bytes: int = 64 * MiB, cache_seconds: float = 300.0) -> None:
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.allow_private = allow_private
        self._client = client
        self._cache_bytes = cache_bytes
        self._cache_seconds = cache_seconds
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cached_bytes = 0

    def __repr__(self) -> str:
        return (f"AttachmentFetcher(max_bytes={self.max_bytes}, "
                f"allow_private={self.allow_private})")

    async def inline(self, block: Attachment) -> Attachment:
        """``block`` with the bytes of its URL as ``data`` (``AttachmentError`` if refused)."""
        url = block.url or ""
        media_type, data = await self._get(url)
        served = _media_type(block, media_type, url)
        name = block.name if isinstance(block, DocumentContent) else None
        if isinstance(block, DocumentContent) and not name:
            name = httpx.URL(url).path.rsplit("/", 1)[-1] or None
        if isinstance(block, DocumentContent):
            return dataclasses.replace(block, data=data, url=None, mime_type=served, name=name)
        return dataclasses.replace(block, data=data, url=None, mime_type=served)

    async def _get(self, url: str) -> tuple[str, str]:
        cached = self._cache.get(url)
        if cached is not None and cached.expires > time.monotonic():
            self._cache.move_to_end(url)
            return cached.media_type, cached.data
        media_type, body = await self._fetch(url)
        data = base64.b64encode(body).decode("ascii")
        self._remember(url, _Cached(time.monotonic() + self._cache_seconds, media_type, data))
        return media_type, data

    async def _fetch(self, url: str) -> tuple[str, bytes]:
        parsed = httpx.URL(url)
        if parsed.userinfo:
            raise AttachmentError(f"attachment {_shown(parsed)}: a URL with credentials "
                                  "is not fetched")
        try:
            async with asyncio.timeout(self.timeout):
                fetched = await self._guarded_get(parsed)
        except TimeoutError:
            raise AttachmentError(f"attachment {url}: fetching took longer than "
                                  f"{self.timeout:g} s") from None
        except (safe_fetch.FetchRefused, ValueError, httpx.HTTPError) as exc:
            raise AttachmentError(f"attachment {url}: {exc or type(exc).__name__}") from exc
        if fetched.cut:
            raise AttachmentError(f"attachment {url}: larger than {self.max_bytes} bytes "
                                  "(AGENTLOOP_ATTACHMENT_MAX_BYTES)")
        if fetched.response.status_code != 200:
            raise AttachmentError(f"attachment {url}: answered HTTP "
                                  f"{fetched.response.status_code}")
        return fetched.media_type, fetched.body

    async def _guarded_get(self, url: httpx.URL) -> safe_fetch.Fetched:
        if self._client is not None:
            return await self._get_with(self._client, url)
        async with httpx.AsyncClient(trust_env=False, timeout=self.timeout) as client:
            return await self._get_with(client, url)

    async def _get_with(self, client: httpx.AsyncClient, url: httpx.URL) -> safe_fetch.Fetched:
        return await safe_fetch.fetch(client, url, allow_private=self.allow_private,
                                      max_bytes=self.max_bytes, user_agent=USER_AGENT,
                                      schemes=("https",))

    def _remember(self, url: str, entry: _Cached) -> None:
        size = decoded_size(entry.data)
        if size > self._cache_bytes:
            return
        old = self._cache.pop(url, None)
        if old is not None:
            self._cached_bytes -= decoded_size(old.data)
        self._cache[url] = entry
        self._cached_bytes += size
        while self._cached_bytes > self._cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cached_bytes -= decoded_size(dropped.data)


def _shown(url: httpx.URL) -> str:
    """``url`` without its credentials (never echoed into an error)."""
    return str(url.copy_with(userinfo=b""))


def _media_type(block: Attachment, served: str, url: str) -> str:
    """The media type of what ``url`` served, checked against the block's own."""
    declared = block.mime_type or ""
    if isinstance(block, ImageContent):
        if served in IMAGE_TYPES:
            return served
        if served in _UNTYPED and declared in IMAGE_TYPES:
            return declared
        raise AttachmentError(f"attachment {url}: served as {served or 'no type'!r}, not an "
                              "image (" + ", ".join(sorted(IMAGE_TYPES)) + ")")
    if served == declared or (served in _UNTYPED and declared):
        return declared
    if declared in TEXT_TYPES and served.startswith("text/"):
        return declared
    raise AttachmentError(f"attachment {url}: served as {served or 'no type'!r}, not the "
                          f"document's {declared!r}")
