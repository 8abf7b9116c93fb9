"""The shared state's parts: RFC 6902 JSON Patch (the RFC's own examples), the holder's
all-or-none updates, a resumed run's state rebuilt from its log, and ``emit_data``'s checks."""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.engine.events import Event, StateDelta, StateSnapshot, encode_event_body, utc_now
from app.engine.json_patch import PatchError, apply_patch
from app.engine.shared_state import SharedState, fold
from app.store.memory.backend import MemoryBackend
from app.store.records import EventBatch, RunRecord
from app.worker.run_state import run_state
from tool_registry import ToolContext

RFC_CASES: list[tuple[Any, list[dict[str, Any]], Any]] = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}],
     {"baz": "qux", "foo": "bar"}),
    ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}],
     {"foo": ["bar", "qux", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}],
     {"foo": ["bar", "baz"]}),
    ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
     {"baz": "boo", "foo": "bar"}),
    ({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
     [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
     {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
    ({"foo": ["all", "grass", "cows", "eat"]}, [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
     {"foo": ["all", "cows", "eat", "grass"]}),
    ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
     {"foo": "bar", "child": {"grandchild": {}}}),
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
     {"foo": ["bar", ["abc", "def"]]}),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    ({"a": 1}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": 1, "b": 1}),
]


@pytest.mark.parametrize(("doc", "patch", "expected"), RFC_CASES)
def test_rfc_6902_examples(doc: Any, patch: list[dict[str, Any]], expected: Any) -> None:
    assert apply_patch(doc, patch) == expected


@pytest.mark.parametrize("patch", [
    [{"op": "add", "path": "/baz/bat", "value": "qux"}],  # a parent that does not exist
    [{"op": "test", "path": "/baz", "value": "bar"}, {"op": "add", "path": "/x", "value": 1}],
    [{"op": "remove", "path": "/nope"}], [{"op": "move", "from": "/a", "path": "/a/b"}],
    [{"op": "add", "path": "/list/5", "value": 1}], [{"op": "add", "path": "x", "value": 1}],
    [{"op": "frobnicate", "path": "/a"}], [{"op": "add", "path": "/a"}], "not a list",
])
def test_a_patch_that_does_not_apply_changes_nothing(patch: Any) -> None:
    doc = {"baz": "qux", "a": {"k": 1}, "list": [1]}
    with pytest.raises(PatchError):
        apply_patch(doc, patch)
    assert doc == {"baz": "qux", "a": {"k": 1}, "list": [1]}


def test_the_holder_emits_what_it_applies_and_refuses_all_or_none() -> None:
    seen: list[Event] = []
    state = SharedState({"n": 1})
    state.bind(seen.append)
    state.announce()
    state.patch([{"op": "replace", "path": "/n", "value": 2}])
    with pytest.raises(ValueError):
        state.patch([{"op": "replace", "path": "/n", "value": 3},
                     {"op": "remove", "path": "/missing"}])
    with pytest.raises(ValueError):
        state.patch([{"op": "replace", "path": "", "value": [1]}])  # no longer an object
    with pytest.raises(ValueError):
        state.set({"big": "x" * 300_000})
    assert state.value == {"n": 2}
    assert [type(e) for e in seen] == [StateSnapshot, StateDelta]
    copy = state.value
    assert copy is not None
    copy["n"] = 99  # a reader's copy: the state is not changed behind the holder's back
    assert state.value == {"n": 2}


async def test_a_resumed_run_goes_on_from_the_state_its_log_built() -> None:
    backend = MemoryBackend(lease=5.0)
    record = RunRecord(id=f"run_{time.time_ns()}", tenant="t", created_at=time.time(),
                       request={"state": {"cart": []}})
    await backend.create_run(record)
    batch = [("state_snapshot", StateSnapshot(state={"cart": []})),
             ("state_delta", StateDelta(delta=[{"op": "add", "path": "/cart/-", "value": "a"}])),
             ("state_delta", StateDelta(delta=[{"op": "add", "path": "/n", "value": 1}]))]
    await backend.append_events(record.id, None, EventBatch(events=[
        (kind, encode_event_body(e, run_id=record.id, ts=utc_now())) for kind, e in batch]))
    stored = await backend.get_run(record.id)
    assert stored is not None
    assert (await run_state(backend, stored)).value == {"cart": ["a"], "n": 1}
    assert fold([], {"x": 1}) == {"x": 1}


def test_emit_data_checks_its_name() -> None:
    got: list[tuple[str, Any, str | None]] = []
    ctx = ToolContext(data=lambda name, data, id_: got.append((name, data, id_)))
    ctx.emit_data("chart", {"points": [1, 2]}, id="c")
    for bad in ("", "has space", "x" * 65, "output", "state"):
        with pytest.raises(ValueError):
            ctx.emit_data(bad, {})
    assert got == [("chart", {"points": [1, 2]}, "c")]
    with pytest.raises(ValueError):
        ToolContext().update_state([])  # a tool called outside any run has no state
