"""The body ``useChat``'s ``DefaultChatTransport`` posts, and its UI messages as our messages.

The chat's thread holds the conversation, so of the messages only the last, the user's, is
posted; the others are still checked (a malformed one is a 422 naming it). ``trigger``
``regenerate-message`` is refused (422): a thread's history is not rewritten.

The transport sends ``{id, messages, trigger, messageId?}`` plus whatever the page puts in the
transport's ``body`` option: the run options (``app.api.options``, as on ``POST /runs``). A UI
message's parts become our content: ``text`` and ``file`` parts (``app.dialects.attachments``)
of user messages; ``text`` and finished tool parts (``tool-<name>`` or ``dynamic-tool`` with an
output or an error) of assistant messages, one assistant message per ``step-start`` with the
results of its calls after it; the text of ``system`` messages becomes the run's ``system``.
Other parts (reasoning, sources, data parts) are left out. Errors name the field
(``messages[2].parts[0].url``).
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import ConfigDict, Field, StrictBool

from app.api.errors import ApiError
from app.api.options import AgentName, RunOptions
from app.dialects.attachments import from_ai_sdk_file
from app.dialects.conversation import CHAT_ID


class ChatRequest(RunOptions):
    """``POST /ai-sdk/chat`` body: the transport's fields beside the run options (the page
    sets those in the transport's ``body``)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=CHAT_ID, description="the chat id (the conversation)")
    agent: AgentName | None = Field(default=None, description="the agent to run (GET /agents)")
    messages: list[dict[str, Any]] = Field(min_length=1, description="UI messages")
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = None  # the transport's name
    cancel_on_disconnect: StrictBool = Field(default=False, description=(
        "cancel the run when the client closes the stream before its end (the SDK's stop());"
        " by default the run goes on"))

    def run_options(self) -> dict[str, Any]:
        """The run options this request sets (422 for a ``regenerate-message``)."""
        if self.trigger == "regenerate-message":
            raise _invalid("trigger", "regenerate-message is not supported: the chat's thread "
                           "keeps its history (send a new message instead)")
        return self.option_fields()


def _invalid(field: str, problem: str) -> ApiError:
    return ApiError(422, "validation_error", f"{field}: {problem}", field)


def to_messages(ui: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """(our messages, the system text) from the UI messages; the last must be the user's."""
    out: list[dict[str, Any]] = []
    system: list[str] = []
    for i, message in enumerate(ui):
        field = f"messages[{i}]"
        parts = message.get("parts")
        if not isinstance(parts, list):
            raise _invalid(f"{field}.parts", "must be a list of parts")
        role = message.get("role")
        if role == "user":
            out.append({"role": "user", "content": _user_content(parts, field)})
        elif role == "assistant":
            out.extend(_assistant_steps(parts, field))
        elif role == "system":
            system.append(_text_of(parts))
        else:
            raise _invalid(f"{field}.role", "must be user, assistant or system")
    if ui[-1].get("role") != "user":
        raise _invalid(f"messages[{len(ui) - 1}].role", "the last message must be the user's")
    return out, "\n\n".join(system) or None


def _text_of(parts: list[Any]) -> str:
    return "".join(str(p.get("text", "")) for p in parts
                   if isinstance(p, dict) and p.get("type") == "text")


def _user_content(parts: list[Any], field: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "file":
            blocks.append(from_ai_sdk_file(part, f"{field}.parts[{j}]"))
    if not blocks:
        raise _invalid(f"{field}.parts", "a user message needs a text or file part")
    return blocks


def _assistant_steps(parts: list[Any], field: str) -> list[dict[str, Any]]:
    """One assistant message per step, each followed by the results of its tool calls."""
    out: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in [*parts, {"type": "step-start"}]:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "step-start":
            if content:
                out += [{"role": "assistant", "content": content}, *results]
            content, results = [], []
        elif kind == "text" and part.get("text"):
            content.append({"type": "text", "text": str(part["text"])})
        elif isinstance(kind, str) and _finished_tool(part):
            content.append(_tool_call(part, kind))
            results.append(_tool_result(part, content[-1]["name"]))
    return out


def _finished_tool(part: dict[str, Any]) -> bool:
    kind = str(part.get("type"))
    is_tool = kind.startswith("tool-") or kind == "dynamic-tool"
    return is_tool and part.get("state") in ("output-available", "output-error")


def _tool_call(part: dict[str, Any], kind: str) -> dict[str, Any]:
    name = str(part.get("toolName")) if kind == "dynamic-tool" else kind.removeprefix("tool-")
    args = part.get("input")
    return {"type": "tool_call", "id": str(part.get("toolCallId")), "name": name,
            "arguments": args if isinstance(args, dict) else {}}


def _tool_result(part: dict[str, Any], name: str) -> dict[str, Any]:
    failed = part.get("state") == "output-error"
    output = part.get("errorText") if failed else part.get("output")
    return {"role": "tool_result", "tool_call_id": str(part.get("toolCallId")),
            "tool_name": name, "content": [{"type": "text", "text": _output_text(output)}],
            "is_error": failed}


def _output_text(output: Any) -> str:
    """A tool's output as the model saw it: our result's text blocks, else the JSON."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict) and isinstance(output.get("content"), list):
        return "".join(str(b.get("text", "")) for b in output["content"]
                       if isinstance(b, dict) and b.get("type") == "text")
    return orjson.dumps(output).decode()
