"""Component schemas of the streamed vocabulary, for the OpenAPI document (``app/api/openapi.py``).

- a named component schema for every event (``Event``, discriminated by ``type``), message role
  (``Message``, by ``role``), content block, ``Usage``, ``MessageDelta`` and ``ToolResult``,
  generated from the dataclasses in ``app/engine/events.py`` and ``providers/messages.py`` so the
  document cannot drift from what is streamed; every event carries the ``seq``/``run_id``/``ts``
  envelope, and only the fields the encoder leaves out when unset are optional;
- ``*Input`` variants of messages and content blocks for request bodies, where a field with a
  default may be left out (the output variants mark it required, as it is always sent);
- request defaults moved into descriptions (``without_defaults``): openapi-typescript makes a
  field with a ``default`` required, so every TypeScript caller would have to give it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, TypeAdapter
from typing_extensions import TypedDict

from app.engine.events import OMIT_IF_NONE, Event
from providers.messages import AssistantContent, Message, ToolResultContent, UserContent

REF = "#/components/schemas/{model}"
Json = dict[str, Any]


class MessageDelta(TypedDict):
    """One streamed piece of the assistant message (``message_update.delta``)."""

    kind: Literal["text_delta", "thinking_delta", "toolcall_start", "toolcall_delta",
                  "toolcall_end"]
    content_index: int
    text: NotRequired[str]
    tool_call_id: NotRequired[str]
    tool_name: NotRequired[str]
    arguments: NotRequired[dict[str, Any]]


class ToolResult(TypedDict):
    """What a tool returned (``tool_execution_end.result``)."""

    content: list[ToolResultContent]
    details: Any


NAMED_UNIONS = {"Message": Message, "UserContent": UserContent,
                "ToolResultContent": ToolResultContent, "AssistantContent": AssistantContent}
"""Discriminated unions that get a component of their own instead of being inlined."""
ENUMS: dict[str, Json] = {
    "RunStatus": {"type": "string",
                  "enum": ["queued", "running", "requires_action", "completed",
                           "failed", "cancelled"]},
    "RunStopReason": {"type": "string", "enum": ["stop", "max_iterations", "error", "aborted",
                                                 "output_invalid", "budget"]},
}
ENVELOPE: Json = {
    "seq": {"type": "integer", "minimum": 1, "description": "position in the run's log, from 1"},
    "run_id": {"type": "string"},
    "ts": {"type": "string", "format": "date-time", "description": "when it was written (UTC)"},
}


def _union_key(node: Json) -> frozenset[str] | None:
    mapping = node.get("discriminator", {}).get("mapping")
    return frozenset(mapping.values()) if "oneOf" in node and mapping else None


def _name_unions(node: Any, names: dict[frozenset[str], str]) -> Any:
    """``node`` with every inlined named union replaced by a ``$ref`` to its component."""
    if isinstance(node, list):
        return [_name_unions(item, names) for item in node]
    if not isinstance(node, dict):
        return node
    key = _union_key(node)
    if key in names:
        return {"$ref": REF.format(model=names[key])}
    return {k: _name_unions(v, names) for k, v in node.items()}


def _generate(mode: Literal["validation", "serialization"]) -> dict[str, Json]:
    """Component schemas of the event and message vocabulary (``Event`` and the unions too)."""
    roots: dict[str, Any] = {"Event": Annotated[Event, Field(discriminator="type")],
                             **NAMED_UNIONS, "MessageDelta": MessageDelta,
                             "ToolResult": ToolResult}
    defs: dict[str, Json] = {}
    for name, tp in roots.items():
        schema = TypeAdapter(tp).json_schema(mode=mode, ref_template=REF)
        defs.update(schema.pop("$defs", {}))
        schema.pop("title", None)
        defs[name] = schema
    names = {key: n for n in NAMED_UNIONS if (key := _union_key(defs[n])) is not None}
    return {name: _name_unions(schema, names) if name not in NAMED_UNIONS else schema
            for name, schema in defs.items()}


def _drop_null(prop: Json) -> Json:
    """An optional field that is left out, never sent as null."""
    options = [o for o in prop.get("anyOf", []) if o != {"type": "null"}]
    rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    return {**rest, **options[0]} if len(options) == 1 else rest


def _may_be_unset(prop: Json) -> bool:
    """Whether a field can be None (a nullable union, or a schema of any value)."""
    return "anyOf" in prop or "type" not in prop


def _as_sent(schema: Json, *, event: bool) -> Json:
    """An output object schema: every field required but those left out when unset."""
    props = {k: v for k, v in schema["properties"].items()}
    omitted = {name for name in props.keys() & OMIT_IF_NONE if _may_be_unset(props[name])}
    for name in omitted:
        props[name] = _drop_null(props[name])
    if event:
        props = {**ENVELOPE, **props}
    for prop in props.values():
        prop.pop("default", None)
    required = [k for k in props if k not in omitted]
    return {**schema, "properties": props, "required": required}


def output_schemas() -> dict[str, Json]:
    """The vocabulary as it is sent: ``Event``, its members, messages, blocks, ``Usage``."""
    defs = _generate("serialization")
    event_names = {ref.rsplit("/", 1)[1] for ref in defs["Event"]["discriminator"]["mapping"]
                   .values()}
    for name, schema in defs.items():
        if "properties" in schema and name not in ("MessageDelta", "ToolResult"):
            defs[name] = _as_sent(schema, event=name in event_names)
    defs["MessageUpdate"]["properties"]["delta"] = {"$ref": REF.format(model="MessageDelta")}
    defs["ToolExecutionEnd"]["properties"]["result"] = {"$ref": REF.format(model="ToolResult")}
    return {**defs, **ENUMS}


def _rename(node: Any, renames: dict[str, str]) -> Any:
    if isinstance(node, list):
        return [_rename(item, renames) for item in node]
    if isinstance(node, str) and node.startswith("#/components/schemas/"):
        return REF.format(model=renames.get(node.rsplit("/", 1)[1], node.rsplit("/", 1)[1]))
    if isinstance(node, dict):
        return {k: _rename(v, renames) for k, v in node.items()}
    return node


def input_schemas() -> dict[str, Json]:
    """Messages and content blocks as requests may give them: ``MessageInput``, ...; only the
    discriminator and the fields without a default are required."""
    defs = {k: v for k, v in _generate("validation").items()
            if k not in ("Event", "MessageDelta", "ToolResult")}
    wanted = {"Message", *NAMED_UNIONS, *_reachable(defs, ["Message"])}
    renames = {name: f"{name}Input" for name in wanted}
    out: dict[str, Json] = {}
    for name in wanted:
        schema = _rename(defs[name], renames)
        for tag in ("role", "type"):  # the discriminator: pydantic needs it in the input
            if tag in schema.get("properties", {}):
                schema["required"] = [tag, *[r for r in schema.get("required", []) if r != tag]]
        if "title" in schema:
            schema["title"] = renames[name]
        out[renames[name]] = without_defaults(schema)
    return out


def _reachable(defs: dict[str, Json], roots: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [ref.rsplit("/", 1)[1] for ref in _refs(defs[name])]
    return seen


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [node["$ref"]] if "$ref" in node else [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def without_defaults(schema: Json) -> Json:
    """``schema`` with each ``default`` stated in its description instead (recursively)."""
    out: Json = {}
    for key, value in schema.items():
        if isinstance(value, dict):
            value = without_defaults(value)
        elif isinstance(value, list):
            value = [without_defaults(v) if isinstance(v, dict) else v for v in value]
        out[key] = value
    if "default" in out and "const" not in out:
        note = f"Default: `{json.dumps(out.pop('default'))}`."
        out["description"] = f"{out['description']} ({note})" if "description" in out else note
    out.pop("default", None)
    return out
