"""A scripted provider and tools for worker processes running a nested approval
(``AGENTLOOP_PROVIDER_FACTORY=tests.approvals.nested_scripted:factory``): the run's model
picks ``delegate``, whose nested loop picks ``mark`` (the run asks approval for it). Every
model call and every run of ``delegate``'s body is recorded in the AGENTLOOP_TEST_MARKS file."""

from __future__ import annotations

import os
from collections.abc import Callable

from providers import fake
from providers.base import ModelRequest, Provider
from providers.fake import FakeProvider, Step
from tests.engine.scripted import mark, resolver, tool_results
from tool_registry import function

INNER = "inner task"


def _note(line: str) -> None:
    path = os.environ.get("AGENTLOOP_TEST_MARKS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


@function(register=False)
async def delegate(task: str) -> str:
    """Runs a nested loop on the run's model."""
    from app import runtime

    _note("delegate")
    out = await runtime.exec(task)
    return f"inner said: {out.text}"


def step(request: ModelRequest) -> Step:
    """Stateless: the nested loop (its prompt is ``INNER``) picks mark, then answers; the
    run's loop picks delegate, then answers "done"."""
    first = request.messages[0]
    inner = first.role == "user" and first.content == INNER
    n = tool_results(request)
    _note(f"ask:{'inner' if inner else 'outer'}:{n}")
    if inner:
        return fake.tool_calls(("mark", {"n": 7}, "call_inner_mark")) if n == 0 else \
            fake.text("inner done")
    return fake.tool_calls(("delegate", {"task": INNER}, "call_delegate")) if n == 0 else \
        fake.text("done")


def factory() -> Callable[[str], tuple[Provider, str]]:
    from tool_registry import default_registry

    default_registry.register(mark)
    default_registry.register(delegate)
    return resolver(lambda: FakeProvider(script=[step], repeat=True))
