"""The OpenAPI document as a typed contract that client generators use as is.

FastAPI documents the routes and their pydantic bodies; ``contract`` adds what it cannot see:
the streamed vocabulary (``app/api/wire_schema.py``), the ``bearer`` and ``streamToken`` security
schemes and each operation's requirement, request defaults stated in descriptions (so generated
TypeScript leaves defaulted options optional), and error responses that all name the
``{"error": ...}`` body the app sends: FastAPI's own 422 ``{"detail": [...]}`` is never sent,
so it is dropped (a route that can answer 422 documents it with ``app.api.errors.documented``).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.wire_schema import Json, input_schemas, output_schemas, without_defaults

SECURITY_SCHEMES: Json = {
    "bearer": {"type": "http", "scheme": "bearer", "description":
               "an API key (AGENTLOOP_API_KEYS); with no keys configured, auth is off"},
    "streamToken": {"type": "apiKey", "in": "query", "name": "token", "description":
                    "a run's stream_token (every Run carries a fresh one): read-only, "
                    "that run's events only"},
}
PUBLIC_OPERATIONS = frozenset({"getHealth", "getReadiness", "getMetrics"})
"""Operations that never ask for credentials."""
STREAM_OPERATIONS = frozenset({"streamRunEvents", "streamThreadEvents"})
"""Operations that also accept a stream token."""
REQUEST_SCHEMAS = ("CreateRun", "ForcedChoice", "QueueMessageIn")
"""FastAPI's components that only requests use: their defaults move into descriptions."""
FASTAPI_VALIDATION = ("HTTPValidationError", "ValidationError")


def install_contract(app: FastAPI) -> None:
    """Serve ``contract(...)`` of the app's routes as ``/openapi.json`` (built once)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = contract(get_openapi(
                title=app.title, version=app.version, description=app.description,
                routes=app.routes, tags=app.openapi_tags))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def contract(doc: Json) -> Json:
    """FastAPI's document completed as described in the module docstring."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in FASTAPI_VALIDATION:
        schemas.pop(name, None)
    for name in REQUEST_SCHEMAS:
        if name in schemas:
            schemas[name] = without_defaults(schemas[name])
    schemas.update(output_schemas())
    schemas.update(input_schemas())
    doc["components"]["schemas"] = dict(sorted(schemas.items()))
    doc["components"]["securitySchemes"] = SECURITY_SCHEMES
    doc["paths"] = _resolve_components(doc.get("paths", {}))
    doc["components"]["schemas"] = _resolve_components(doc["components"]["schemas"])
    for operation in _operations(doc):
        _complete(operation)
    return doc


def _resolve_components(node: Any) -> Any:
    """Every ``{"x-component": name, ...}`` (``app.api.schemas``) as ``{"$ref": ...}``."""
    if isinstance(node, list):
        return [_resolve_components(item) for item in node]
    if not isinstance(node, dict):
        return node
    if "x-component" in node:
        return {"$ref": f"#/components/schemas/{node['x-component']}"}
    return {key: _resolve_components(value) for key, value in node.items()}


def _operations(doc: Json) -> list[Json]:
    return [op for item in doc.get("paths", {}).values() for op in item.values()]


def _complete(operation: Json) -> None:
    op_id = operation.get("operationId", "")
    if op_id in PUBLIC_OPERATIONS:
        operation["security"] = []
    else:
        operation["security"] = [{"bearer": []}] + (
            [{"streamToken": []}] if op_id in STREAM_OPERATIONS else [])
    responses = operation.get("responses", {})
    for status in [s for s, r in responses.items() if _is_fastapi_validation(r)]:
        del responses[status]
    for param in operation.get("parameters", []):
        param["schema"] = without_defaults(param.get("schema", {}))


def _is_fastapi_validation(response: Json) -> bool:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref", "").endswith("/HTTPValidationError"))
