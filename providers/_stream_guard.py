"""The frame every adapter's ``stream`` shares: open, decode, close, and never raise.

An adapter supplies how to build its ``httpx.Request`` and a ``WireDecoder`` that turns the open
response into provider events. ``guarded_stream`` adds what the ``Provider`` contract promises:

- ``start`` first (the decoder's own, or one naming the requested model), then exactly one
  ``done`` or ``error``, nothing after it;
- a failed request (after ``open_stream``'s retries), a stream broken midway or a stream that ends
  without its terminal event becomes an ``error`` event — broken streams are ``retryable``;
- the response is closed on every path, including the consumer's ``aclose()`` or cancellation;
  after a terminal event its last bytes are read first (``finish_response``), so the
  connection is reused.

Nothing here logs headers or bodies: keys and ``Authorization`` never reach a log line.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Protocol

import httpx

from providers._http import ProviderHTTPError, RetryPolicy, finish_response, open_stream
from providers.events import DoneEvent, ErrorEvent, ProviderEvent, StartEvent
from providers.messages import Usage

log = logging.getLogger(__name__)

_TERMINAL = (DoneEvent, ErrorEvent)  # a tuple: ``A | B`` would build a union per event


class WireDecoder(Protocol):
    """Turns one open 2xx response into provider events.

    ``usage`` is what the stream has reported so far; it is attached to the ``error`` event when
    the stream breaks. The decoder may yield its own terminal event (an in-stream error frame).
    """

    @property
    def usage(self) -> Usage:
        """What the stream has reported so far (read only by the frame)."""
        ...

    def events(self, response: httpx.Response) -> AsyncGenerator[ProviderEvent, None]:
        """The events of ``response``; may raise on transport or format failures."""
        ...


async def guarded_stream(*, label: str, model: str, client: httpx.AsyncClient,
                         build: Callable[[], Awaitable[httpx.Request]], retry: RetryPolicy,
                         decoder: WireDecoder) -> AsyncIterator[ProviderEvent]:
    """Stream one reply under the ``Provider`` contract (see the module docstring)."""
    try:
        response = await open_stream(client, await build(), retry)
    except ProviderHTTPError as exc:
        yield StartEvent(model=model)
        yield ErrorEvent("error", f"{label}: HTTP {exc.status}: {exc.message}",
                         retryable=exc.retryable)
        return
    except httpx.TransportError as exc:
        yield StartEvent(model=model)
        yield ErrorEvent("error", f"{label}: connection failed ({type(exc).__name__})",
                         retryable=True)
        return
    except Exception as exc:  # building the request: credentials, serialisation
        yield StartEvent(model=model)
        yield ErrorEvent("error", f"{label}: could not send the request: {exc}")
        return
    started = ended = False
    try:
        async with aclosing(decoder.events(response)) as events:
            async for event in events:
                if isinstance(event, StartEvent):
                    if started:
                        continue
                elif not started:
                    yield StartEvent(model=model)
                started = True
                if isinstance(event, _TERMINAL):
                    ended = True  # before the yield: the consumer may stop at this event
                    yield event
                    return
                yield event
        tail = _broken(label, "the stream ended before the reply was complete", decoder)
    except httpx.HTTPError as exc:
        log.warning("%s stream broke midway: %s", label, type(exc).__name__)
        tail = _broken(label, f"the stream broke midway ({type(exc).__name__})", decoder)
    except Exception as exc:
        log.warning("%s sent a stream we could not read: %s", label, type(exc).__name__)
        tail = ErrorEvent("error", f"{label}: unreadable stream: {exc}",
                          usage=replace(decoder.usage))
    finally:
        await (finish_response(response) if ended else response.aclose())
    if not started:
        yield StartEvent(model=model)
    yield tail


def _broken(label: str, why: str, decoder: WireDecoder) -> ErrorEvent:
    return ErrorEvent("error", f"{label}: {why}", usage=replace(decoder.usage), retryable=True)
