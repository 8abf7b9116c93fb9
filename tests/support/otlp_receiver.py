"""An OTLP/HTTP trace receiver on loopback for tests: it answers every export 200 and decodes
the protobuf bodies (``ExportTraceServiceRequest``) into plain ``Span`` values, so a test
checks what a service process really sent, with the OTLP HTTP exporter, over the wire::

    async with OtlpReceiver() as receiver:
        ... start a process with OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url ...
        spans = await receiver.until(lambda spans: any(s.name == "x" for s in spans))
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.wire_server import Reply, WireServer


@dataclass(frozen=True, slots=True)
class Span:
    """One decoded span: ids as lowercase hex (``parent`` None for a root span)."""

    name: str
    trace_id: str
    span_id: str
    parent: str | None
    attributes: dict[str, Any]
    status: int
    """0 unset, 1 ok, 2 error."""
    resource: dict[str, Any]
    scope: str


class OtlpReceiver:
    """An OTLP/HTTP endpoint (``url``: the ``OTEL_EXPORTER_OTLP_ENDPOINT``) recording the
    spans exported to ``/v1/traces``."""

    def __init__(self) -> None:
        self.wire = WireServer(default=Reply(200, chunked=False,
                                             content_type="application/x-protobuf"))

    @property
    def url(self) -> str:
        return self.wire.url

    async def __aenter__(self) -> OtlpReceiver:
        await self.wire.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.wire.__aexit__(*exc)

    def spans(self) -> list[Span]:
        """Every span received so far, in the order they came."""
        out: list[Span] = []
        for request in list(self.wire.requests):
            assert request.path == "/v1/traces", request.path
            assert request.headers.get("content-type") == "application/x-protobuf"
            body = request.body
            if request.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            sent = ExportTraceServiceRequest.FromString(body)
            for rs in sent.resource_spans:
                resource = {a.key: plain(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out += [Span(name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                                 parent=s.parent_span_id.hex() or None,
                                 attributes={a.key: plain(a.value) for a in s.attributes},
                                 status=s.status.code, resource=resource,
                                 scope=ss.scope.name) for s in ss.spans]
        return out

    async def until(self, done: Callable[[list[Span]], bool], within: float = 60.0
                    ) -> list[Span]:
        """The spans received, once ``done`` holds for them (fails after ``within`` s)."""
        try:
            async with asyncio.timeout(within):
                while not done(spans := self.spans()):
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise AssertionError(f"spans so far: {[s.name for s in self.spans()]}") from None
        return spans


def plain(value: AnyValue) -> Any:
    """An attribute's value as Python (arrays as tuples, as the SDK keeps them)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(plain(v) for v in value.array_value.values)
    if kind is None:
        return None
    return getattr(value, kind)
