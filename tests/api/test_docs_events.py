"""docs/events.md stays in step with app/engine/events.py: every event type has its section, and
every field of it (and every ``message_update`` delta kind) is named there."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

from app.engine.events import Event
from providers.events import ToolCallDelta, ToolCallEnd, ToolCallStart

DOC = Path(__file__).parents[2] / "docs" / "events.md"
COMMON = {"type", "depth", "parent_tool_call_id"}
"""Fields of every event, documented once in the common table."""


def sections() -> dict[str, str]:
    """``### `type``` heading → the text up to the next heading."""
    parts = re.split(r"^### `([a-z_]+)`\s*$", DOC.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_event_type_and_field_is_documented() -> None:
    documented = sections()
    types = {}
    for cls in typing.get_args(Event):
        fields = {f.name for f in dataclasses.fields(cls)}
        types[cls.__dataclass_fields__["type"].default] = fields - COMMON
    assert set(documented) == set(types)
    for name, fields in types.items():
        for field in fields:
            assert f"| `{field}` |" in documented[name], f"{name}.{field} is not documented"
    text = DOC.read_text(encoding="utf-8")
    for field in ("seq", "run_id", "ts", *COMMON):
        assert f"| `{field}` |" in text


def test_every_delta_kind_is_documented() -> None:
    update = sections()["message_update"]
    kinds = ["text_delta", "thinking_delta"] + [
        cls.__dataclass_fields__["type"].default
        for cls in (ToolCallStart, ToolCallDelta, ToolCallEnd)]
    for kind in kinds:
        assert f"`{kind}`" in update
