"""The body ``useChat``'s ``DefaultChatTransport`` posts, and its UI messages as our messages.

The chat's thread holds the conversation, so of the messages only the last, the user's, is
read, checked and posted (its ``id``, the client's, kept with it: the history returns it);
the earlier ones are the client's copy of what the thread holds and are not read again, so
a message the server refused once (and did not store) does not fail every later send.
``trigger`` ``regenerate-message`` replaces the chat's last reply (``app.dialects.ai_sdk.routes``).

The transport sends ``{id, messages, trigger, messageId?}`` plus whatever the page puts in the
transport's ``body`` option: the run options (``app.api.options``, as on ``POST /runs``). A UI
message's parts become our content: ``text`` and ``file`` parts (``app.dialects.attachments``)
of user messages; the text of ``system`` messages (wherever they are) becomes the run's
``system``. Other parts (reasoning, sources, data parts) are left out. Errors name the field
(``messages[2].parts[0].url``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, StrictBool

from app.api.checks import MESSAGE_ID
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
        """The run options this request sets."""
        return self.option_fields()


def _invalid(field: str, problem: str) -> ApiError:
    return ApiError(422, "validation_error", f"{field}: {problem}", field)


def to_messages(ui: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    """(the new user message, the system text): the last message must be the user's."""
    last, message = len(ui) - 1, ui[-1]
    field = f"messages[{last}]"
    if message.get("role") != "user":
        raise _invalid(f"{field}.role", "the last message must be the user's")
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise _invalid(f"{field}.parts", "must be a list of parts")
    prompt: dict[str, Any] = {"role": "user", "content": _user_content(parts, field)}
    client_id = message.get("id")
    if isinstance(client_id, str) and MESSAGE_ID.fullmatch(client_id):  # else not kept
        prompt["id"] = client_id
    system = [_text_of(m["parts"]) for m in ui if isinstance(m, dict)
              and m.get("role") == "system" and isinstance(m.get("parts"), list)]
    return prompt, "\n\n".join(t for t in system if t) or None


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


