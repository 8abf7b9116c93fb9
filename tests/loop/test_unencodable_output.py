"""A tool's output that UTF-8 cannot carry (lone surrogates: a file named in another encoding,
as ``os.listdir`` gives it; a string from a JSON escape) is made encodable where it leaves the
tool, so the run goes on: it once made the run's events unencodable and failed the whole run
("the service failed while driving the run")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.engine.events import json_bytes
from providers import fake
from providers.messages import TextContent
from tests.loop.helpers import drive, registry_with
from tool_registry import ToolContext, ToolResult, function

BAD = "bad\udcffname \ud800 end"  # a surrogate-escaped byte and a lone JSON escape
SHOWN = "bad\ufffdname \ufffd end"


@dataclass
class Found:
    name: str


@function(register=False)
def listing(ctx: ToolContext) -> ToolResult:
    """Reports like a file tool would, surrogates everywhere."""
    ctx.progress({"file": BAD, BAD: [BAD]})
    ctx.emit_data("files", {"path": BAD}, id=BAD)
    return ToolResult(content=[TextContent(text=BAD)],
                      details={"names": [BAD], BAD: 1, (1, BAD): Found(BAD), "n": 2})


@function(register=False)
def fails(path: str) -> str:
    """Raises with the name in its message, as an OSError does."""
    raise FileNotFoundError(f"no such file: {BAD}")


@function(register=False)
def plain() -> str:
    """A string result, surrogates in it."""
    return BAD


async def test_a_tools_unencodable_output_is_replaced_and_the_run_goes_on() -> None:
    run = await drive([fake.tool_calls(("listing", {}), ("fails", {"path": "x"}),
                                       ("plain", {})), fake.text("after")],
                      registry=registry_with(listing, fails, plain))
    assert run.outcome is not None and run.outcome.stop_reason == "stop", run.outcome
    assert run.outcome.result == "after"
    for event in run.events:  # every event encodes, as the sink writes it
        json_bytes(event)
    ends = {e.tool_name: e for e in run.events  # type: ignore[attr-defined]
            if e.type == "tool_execution_end"}
    listed: Any = orjson.loads(json_bytes(ends["listing"].result))
    assert listed["content"] == [{"type": "text", "text": SHOWN}]
    assert listed["details"] == {"names": [SHOWN], SHOWN: 1,
                                 f"(1, {BAD!r})": {"name": SHOWN}, "n": 2}
    assert ends["fails"].is_error
    assert ends["fails"].result["content"][0].text == f"no such file: {SHOWN}"
    assert ends["plain"].result["content"][0].text == SHOWN
    update = next(e for e in run.events if e.type == "tool_execution_update")
    assert update.partial_result == {"file": SHOWN, SHOWN: [SHOWN]}  # type: ignore[attr-defined]
    data = next(e for e in run.events if e.type == "data")
    assert (data.name, data.data, data.id) == (  # type: ignore[attr-defined]
        "files", {"path": SHOWN}, SHOWN)
    # what the model was sent next carries the same replacement
    sent = [c.text for m in run.sent(1) if m.role == "tool_result" for c in m.content
            if isinstance(c, TextContent)]
    assert sent == [SHOWN, f"no such file: {SHOWN}", SHOWN]


async def test_encodable_output_is_passed_on_as_it_is() -> None:
    details = {"when": "2026-12-07", "n": 1}

    @function(register=False)
    def fine() -> ToolResult:
        """Nothing to replace."""
        return ToolResult(content=[TextContent(text="caf\u00e9 \U0001f600")], details=details)

    run = await drive([fake.tool_calls(("fine", {})), fake.text("ok")],
                      registry=registry_with(fine))
    end: Any = next(e for e in run.events if e.type == "tool_execution_end")
    assert end.result["content"][0].text == "caf\u00e9 \U0001f600"
    assert end.result["details"] is details
