"""A reply a lost worker was streaming, and the resumed attempt streaming it again.

When a worker dies mid-reply, the worker that takes the run over makes the interrupted model
call again (``app.engine.resume``): the native log holds the cut-off reply (its ``message_end`` says
the worker was lost), then ``run_resumed``, then the whole reply once more. A dialect client
has no way to take text back (the AI SDK's parts and AG-UI's messages only grow), so the
projectors keep the cut-off reply's blocks open across the takeover and show of the new
attempt only what the client does not have yet::

    lost reply:     "Let me che"                  ┤ worker dies (blocks stay open)
    resumed reply:  "Let me che" "ck the weather"   → the client gets "ck the weather"

A tool that was running is run again by the new worker; the lost attempt's end of it
(``TOOL_LOST``) is held back (``lost_tool_end``) and shown only if no other end comes.

``Shown`` remembers what each block of the depth-0 reply has streamed; ``Rewind`` matches the
re-stream against it. When the new attempt says something else (a sampled model rarely
answers the same twice), the block is *diverged*: the dialect ends what it showed, marked as
superseded, and shows the new attempt's text in a new block.
"""

from __future__ import annotations

from typing import Any

from app.engine.resume import TOOL_LOST, WORKER_LOST

Key = tuple[str, str]
"""A block of a reply: ``(kind, id)``, e.g. ``("text", "0")`` or ``("call", tool_call_id)``."""


def is_lost_reply(event: dict[str, Any]) -> bool:
    """Whether a ``message_end`` closes the run's own reply cut off by a lost worker."""
    message = event.get("message") or {}
    return (not event.get("depth") and message.get("role") == "assistant"
            and message.get("error_message") == WORKER_LOST)


def lost_tool_end(event: dict[str, Any]) -> bool:
    """Whether a ``tool_execution_end`` closes a run's own call a lost worker was running
    (the resumed attempt runs it again)."""
    if event.get("depth") or not event.get("is_error"):
        return False
    content = (event.get("result") or {}).get("content") or []
    return bool(content) and content[0].get("text") == TOOL_LOST


class Shown:
    """The text each block of the depth-0 reply has streamed to the client."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: dict[Key, list[str]] = {}

    def add(self, key: Key, text: str) -> None:
        parts = self._parts.get(key)
        if parts is None:
            self._parts[key] = [text]
        else:
            parts.append(text)

    def reset(self, key: Key, text: str) -> None:
        self._parts[key] = [text]

    def clear(self) -> None:
        self._parts = {}

    def texts(self) -> dict[Key, str]:
        return {key: "".join(parts) for key, parts in self._parts.items()}


class Rewind:
    """The resumed attempt re-streaming a lost reply whose blocks showed ``shown``."""

    __slots__ = ("_left", "_repeated")

    def __init__(self, shown: dict[Key, str]) -> None:
        self._left = {key: text for key, text in shown.items() if text}
        self._repeated: dict[Key, str] = {}

    def pending(self, key: Key) -> bool:
        """Whether the client has text of this block the re-stream has not repeated yet."""
        return key in self._left

    def take(self, key: Key, text: str) -> str | None:
        """What of ``text`` (the block's next delta) the client does not have: ``""`` while
        the re-stream repeats what it has, the rest once it has caught up; None when it
        differs (the block diverged: ``repeated(key)`` + ``text`` is the new attempt's)."""
        left = self._left.get(key)
        if left is None:
            return text
        n = min(len(left), len(text))
        if left[:n] != text[:n]:
            del self._left[key]
            return None
        if len(text) >= len(left):
            del self._left[key]
            self._repeated.pop(key, None)
            return text[len(left):]
        self._left[key] = left[n:]
        self._repeated[key] = self._repeated.get(key, "") + text
        return ""

    def repeated(self, key: Key) -> str:
        """The text of ``key`` the new attempt repeated before it diverged."""
        return self._repeated.pop(key, "")

    def unfinished(self) -> list[Key]:
        """Blocks the new attempt did not repeat to the end (its reply is over)."""
        keys = list(self._left)
        self._left = {}
        return keys
