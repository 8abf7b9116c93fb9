"""Opening a provider's streaming response, with retries before the first byte.

``open_stream`` sends the request and returns the open ``httpx.Response`` once the status is 2xx.
429, 5xx (and provider bodies that say "overloaded") and connection failures are retried with
exponential backoff and full jitter, honouring ``Retry-After``; any other status raises
``ProviderHTTPError`` carrying the provider's own message. Adapters turn that into an ``error``
event: nothing here raises past the adapter.

``finish_response`` closes a response whose reply the protocol already ended (``[DONE]``,
``message_stop``): it first reads what is left of the HTTP message (a few bytes: the last chunk),
bounded in time and size, so the connection goes back to the pool instead of being closed. On
HTTP/1.1 a response closed before its body ended cannot be reused; without this every model call
on httpx's default transport opened a new connection (and TLS handshake).

Exceptions::

    ProviderHTTPError        a non-2xx answer after retries (status, message, retryable)
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from providers._transport import BODY

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    """How hard to try before the first streamed byte."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0


class ProviderHTTPError(Exception):
    """The provider answered with an error status (after any retries)."""

    def __init__(self, status: int, message: str, *, retryable: bool) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.retryable = retryable


def is_retryable_status(status: int, body: bytes) -> bool:
    """429, 5xx, and 4xx bodies that say the server is overloaded."""
    return status == 429 or status >= 500 or b"overloaded" in body.lower()


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``, when present."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


def error_message(body: bytes) -> str:
    """The provider's own error sentence from a JSON error body, else the body text."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:2000] or "(empty body)"
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("Message")
            if isinstance(msg, str):
                return msg
        if isinstance(err, str):
            return err
        msg = data.get("message") or data.get("Message")
        if isinstance(msg, str):
            return msg
    return body.decode("utf-8", "replace")[:2000]


def backoff_delay(policy: RetryPolicy, attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based)."""
    if retry_after is not None:
        return min(retry_after, policy.max_delay)
    return random.uniform(0, min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1)))


DRAIN_SECONDS = 0.25
"""How long ``finish_response`` waits for the rest of a finished reply's HTTP message."""
DRAIN_BYTES = 64 * 1024
"""How much of it ``finish_response`` reads before giving up on the connection."""


class _OneIterator(httpx.AsyncByteStream):
    """A response body read through one iterator however often it is iterated, so that what a
    decoder left unread (its generators suspended, finalized later) can still be read to the end
    by ``finish_response``; closing it closes the transport's stream."""

    __slots__ = ("_inner", "_it", "_read")

    def __init__(self, inner: httpx.AsyncByteStream,
                 body: httpx.AsyncByteStream | None = None) -> None:
        self._inner = inner
        self._read = inner if body is None else body
        """What is iterated: the transport's own body stream when it gave one (``BODY``),
        else ``inner``."""
        self._it: AsyncIterator[bytes] | None = None

    def chunks(self) -> AsyncIterator[bytes]:
        """The one iterator over the transport's stream."""
        if self._it is None:
            self._it = aiter(self._read)
        return self._it

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks():
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive. Unless the body is content-encoded, these are the
    transport's chunks themselves, read through the one iterator ``open_stream`` installed:
    ``aiter_bytes`` adds three generator layers (a decoder and a chunker that do nothing here)
    to every frame of a stream."""
    stream = response.stream
    if isinstance(stream, _OneIterator) and "content-encoding" not in response.headers:
        return stream.chunks()
    return response.aiter_bytes()


async def finish_response(response: httpx.Response) -> None:
    """Read the rest of ``response``'s body (bounded by ``DRAIN_SECONDS`` and ``DRAIN_BYTES``),
    then close it: the connection is reused when the body ended. Never raises; only closes
    when the calling task is being cancelled."""
    task = asyncio.current_task()
    stream = response.stream
    if isinstance(stream, _OneIterator) and not response.is_closed and not (
            task is not None and task.cancelling()):
        try:
            await _drain(stream)
        finally:
            await response.aclose()
    else:
        await response.aclose()


async def _drain(stream: _OneIterator) -> None:
    left = DRAIN_BYTES
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for chunk in stream.chunks():
                left -= len(chunk)
                if left < 0:
                    return
    except Exception:  # best effort: the connection is closed instead of reused
        pass


async def open_stream(client: httpx.AsyncClient, request: httpx.Request,
                      policy: RetryPolicy) -> httpx.Response:
    """Send ``request`` with ``stream=True``; retry what may be retried; return a 2xx response.

    The caller must close the response. Raises ``ProviderHTTPError`` for an error status and
    ``httpx.TransportError`` when the connection keeps failing.
    """
    attempt = 0
    while True:
        attempt += 1
        try:
            response = await client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
                httpx.ReadError, httpx.ReadTimeout) as exc:
            if attempt >= policy.attempts:
                raise
            delay = backoff_delay(policy, attempt, None)
            log.warning("provider connection failed (%s); retry %d in %.2fs",
                        type(exc).__name__, attempt, delay)
            await asyncio.sleep(delay)
            continue
        if response.status_code < 300:
            if isinstance(response.stream, httpx.AsyncByteStream):
                body = response.extensions.get(BODY)
                response.stream = _OneIterator(
                    response.stream, body if isinstance(body, httpx.AsyncByteStream) else None)
            return response
        body = await response.aread()
        await response.aclose()
        retryable = is_retryable_status(response.status_code, body)
        if not retryable or attempt >= policy.attempts:
            raise ProviderHTTPError(response.status_code, error_message(body),
                                    retryable=retryable)
        delay = backoff_delay(policy, attempt, retry_after_seconds(response.headers))
        log.warning("provider answered %d; retry %d in %.2fs",
                    response.status_code, attempt, delay)
        await asyncio.sleep(delay)
