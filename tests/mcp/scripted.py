"""The model of a worker process in the MCP tests (``AGENTLOOP_PROVIDER_FACTORY``): a user
message ``call <tool> <json args>`` picks that tool; a tool result is answered
``done: <its text>``."""

from __future__ import annotations

import json
from collections.abc import Callable

from providers.base import ModelRequest
from providers.fake import FakeProvider, Step, text, tool_calls
from providers.messages import ToolResultMessage, UserMessage


def reply(request: ModelRequest) -> Step:
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return text("done: " + "".join(getattr(b, "text", "") for b in last.content))
    assert isinstance(last, UserMessage) and isinstance(last.content, str)
    _, name, args = last.content.split(" ", 2)
    return tool_calls((name, json.loads(args)))


def factory() -> Callable[[str], tuple[FakeProvider, str]]:
    provider = FakeProvider(script=[reply], repeat=True, record=False)
    return lambda spec: (provider, spec.split(":", 1)[-1])
