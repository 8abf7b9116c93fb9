"""Issue 9 item 2: a tool or provider raising ``SystemExit``, ``KeyboardInterrupt``,
``GeneratorExit`` or any other ``BaseException`` that is not the run's own cancellation is a
failure the model sees; it never escapes to the event loop (which it would stop, taking the
worker process and every run on it down)."""

from __future__ import annotations

import argparse
import sys

import pytest

from providers import fake
from providers.base import ModelRequest
from providers.fake import Step
from tests.loop.helpers import drive, registry_with
from tool_registry import function


class Custom(BaseException):
    """A BaseException subclass no code knows about."""


@function(register=False)
def cli(argv: str) -> str:
    """Parses a command line with argparse, which exits on bad input."""
    parser = argparse.ArgumentParser(prog="cli", exit_on_error=False)
    parser.add_argument("--count", type=int, required=True)
    return str(parser.parse_args(argv.split()).count)


@function(register=False)
def quits(code: int) -> str:
    """Calls sys.exit in a worker thread."""
    sys.exit(code)


@function(register=False)
async def interrupts(kind: str) -> str:
    """Raises a BaseException from a coroutine."""
    errors: dict[str, BaseException] = {"keyboard": KeyboardInterrupt(),
                                        "generator": GeneratorExit(),
                                        "custom": Custom("odd"), "exit": SystemExit("bye")}
    raise errors[kind]


@pytest.mark.parametrize(("tool", "args", "named"), [
    ("cli", {"argv": "--nope"}, "SystemExit (2)"),
    ("quits", {"code": 3}, "SystemExit (3)"),
    ("interrupts", {"kind": "keyboard"}, "KeyboardInterrupt"),
    ("interrupts", {"kind": "generator"}, "GeneratorExit"),
    ("interrupts", {"kind": "custom"}, "Custom (odd)"),
    ("interrupts", {"kind": "exit"}, "SystemExit (bye)"),
])
async def test_a_tool_raising_a_base_exception_is_an_error_result(
        tool: str, args: dict[str, object], named: str) -> None:
    run = await drive([fake.tool_calls((tool, args)), fake.text("after")],
                      registry=registry_with(cli, quits, interrupts))
    assert run.outcome is not None and run.outcome.stop_reason == "stop"
    assert run.outcome.result == "after"  # the run went on: the model saw the failure
    end = next(e for e in run.events if e.type == "tool_execution_end")
    text = end.result["content"][0].text
    assert end.is_error and named in text and f"Tool {tool} failed" in text
    sent = run.sent(1)[-1]
    assert sent.role == "tool_result" and sent.is_error


@pytest.mark.parametrize("error", [SystemExit(1), KeyboardInterrupt(), GeneratorExit(),
                                   Custom("odd")])
async def test_a_provider_raising_a_base_exception_fails_the_model_call(
        error: BaseException) -> None:
    def explode(request: ModelRequest) -> Step:
        raise error

    run = await drive([explode])
    assert run.outcome is not None and run.outcome.stop_reason == "error"
    assert type(error).__name__ in (run.outcome.error or "")
    assert run.types()[-1] == "agent_end"
