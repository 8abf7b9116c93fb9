"""Stored events' bodies: a streamed delta's shortcut encodes exactly as the generic path."""

from __future__ import annotations

import orjson

from app.engine.events import MessageUpdate, TurnStart, encode_event_body, json_bytes

DELTAS = [
    {"kind": "text_delta", "content_index": 0, "text": "héllo \"quoted\"\n"},
    {"kind": "toolcall_delta", "content_index": 2, "tool_call_id": "c1", "tool_name": "t",
     "text": '{"a": 1', "arguments": {"a": 1, "nested": [1.5, None, True]}},
    {"kind": "thinking_delta", "content_index": 1, "text": ""},
]


def _generic(event: object, run_id: str, ts: str) -> bytes:
    body = json_bytes(event)  # the dataclass path every other event takes
    return b'{"run_id":%s,"ts":"%s",%s' % (orjson.dumps(run_id), ts.encode(), body[1:])


def test_a_delta_encodes_as_the_generic_path_does() -> None:
    """Also what catches a field added to ``MessageUpdate`` but not to the shortcut."""
    for delta in DELTAS:
        for depth, parent in ((0, None), (2, "call_parent")):
            event = MessageUpdate(delta=delta, depth=depth, parent_tool_call_id=parent)
            fast = encode_event_body(event, run_id="run_1", ts="2026-12-06T00:00:00.000Z")
            assert fast == _generic(event, "run_1", "2026-12-06T00:00:00.000Z")
            decoded = orjson.loads(fast)
            assert decoded["delta"] == delta and decoded["depth"] == depth
            assert ("parent_tool_call_id" in decoded) == (parent is not None)


def test_other_events_keep_the_generic_path() -> None:
    event = TurnStart(turn=3, depth=1, parent_tool_call_id="p")
    assert encode_event_body(event, run_id="r", ts="t") == _generic(event, "r", "t")
