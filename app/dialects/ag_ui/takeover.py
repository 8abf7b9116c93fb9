"""The takeover part of the AG-UI projector (``app.dialects.takeover``): the reply a lost
worker was streaming stays open, the resumed attempt's re-stream shows only what the client
lacks, a diverging reply is superseded, a tool run again has one result."""

from __future__ import annotations

from typing import Any

from ag_ui.core import BaseEvent, CustomEvent, ToolCallResultEvent

from app.dialects.ag_ui.messages import result_message_id
from app.dialects.ag_ui.wire import AgUiEvent
from app.dialects.takeover import Key, Rewind, Shown

CUT_OFF = "the worker stopped before the call was complete"


class AgUiTakeover:
    """State and steps of a takeover; ``AgUiProjector`` provides the blocks it opens and
    closes."""

    _open: dict[tuple[str, str], BaseEvent]
    _message: dict[tuple[int, str], str]
    _run_id: str
    _seq: int

    def __init__(self) -> None:
        self._shown = Shown()  # what the run's reply streaming now has shown
        self._lost: tuple[Rewind, str, set[str]] | None = None  # cut off: (…, message, calls)
        self._rewind: Rewind | None = None  # ... being streamed again by the resumed attempt
        self._cut: set[str] = set()  # its calls the resumed attempt has not streamed again
        self._held: dict[str, dict[str, Any]] = {}  # a lost worker's tool ends, run again

    def _close(self, which: Any) -> list[AgUiEvent]:
        raise NotImplementedError

    def _close_message(self, message_id: str) -> list[AgUiEvent]:
        raise NotImplementedError

    def _text(self, message_id: str, text: str, sub: str | None) -> list[AgUiEvent]:
        raise NotImplementedError

    def _tool_result(self, event: dict[str, Any], sub: str | None) -> list[AgUiEvent]:
        raise NotImplementedError

    def _resumed(self) -> list[AgUiEvent]:
        """Close what the crashed worker left open but the run's step (its turn goes on) and
        the reply it was streaming (streamed again); a call cut off mid-arguments gets a
        result saying so (else the client would take it for one it must answer)."""
        keep = {key for key in self._open if key[0] == "step" and key[1].startswith("None/")}
        if self._lost is not None:
            _, message_id, calls = self._lost
            ids = {message_id, f"{message_id}-reasoning"}
            keep |= {key for key in self._open if key[1] in ids or
                     (key[0] == "call" and key[1] in calls)}
        cut = [key[1] for key in self._open if key[0] == "call" and key not in keep]
        return [*self._close(lambda key: key not in keep), *self._cut_off(cut)]

    def _cut_off(self, calls: list[str] | set[str]) -> list[AgUiEvent]:
        """Results for calls a lost worker left unfinished (closed first if still open)."""
        out: list[AgUiEvent] = []
        for call_id in sorted(calls):
            closing = self._open.pop(("call", call_id), None)
            out += [closing] if closing is not None else []
            out.append(ToolCallResultEvent(message_id=result_message_id(call_id),
                                           tool_call_id=call_id, content=CUT_OFF, role="tool"))
        return out

    def _rewound(self, delta: dict[str, Any], loop: tuple[int, str], sub: str | None
                 ) -> tuple[list[AgUiEvent], dict[str, Any] | None]:
        """A delta of the resumed attempt streaming the lost reply again: (events to send
        first, the delta with only what the client does not have, or None to send nothing)."""
        rewind, kind = self._rewind, delta["kind"]
        assert rewind is not None
        if kind in ("toolcall_start", "toolcall_end"):
            call_id = delta["tool_call_id"]
            if kind == "toolcall_start" and call_id in self._cut:  # START was sent
                self._cut.discard(call_id)
                return [], None
            return [], delta
        key: Key = ("call", delta["tool_call_id"]) if kind == "toolcall_delta" else \
            ("text" if kind == "text_delta" else "reasoning", "")
        if not rewind.pending(key):
            return [], delta
        new = rewind.take(key, delta["text"])
        if new is None:
            return self._diverged(loop, key), {**delta, "text": rewind.repeated(key) +
                                                      delta["text"]}
        return [], ({**delta, "text": new} if new else None)

    def _diverged(self, loop: tuple[int, str], key: Key) -> list[AgUiEvent]:
        """The resumed attempt says something else than the lost one showed: that message
        ends, superseded, and the new reply streams into a new one. A call of the same id
        with other arguments ends with the arguments shown (AG-UI cannot restart them; the
        rest of its deltas find it closed and are not sent): its result follows as usual."""
        old = self._message.get(loop, "")
        call = key[1] if key[0] == "call" else None
        closing = self._open.pop(("call", call), None) if call is not None else None
        value = {"messageId": old, **({"toolCallId": call} if call is not None else {})}
        out = [*([closing] if closing is not None else []),
               *self._cut_off(self._cut - {call} if call is not None else self._cut),
               *self._close_message(old), CustomEvent(name="agentloop.superseded", value=value)]
        self._message[loop] = f"{self._run_id}-m{self._seq}"
        self._rewind, self._cut = None, set()
        self._shown.clear()
        return out

    def _settle(self) -> list[AgUiEvent]:
        """Once the resumed reply is over (or the run, before it came): calls it did not
        stream again were cut off; text it did not repeat to the end is superseded."""
        out: list[AgUiEvent] = []
        if self._lost is not None:  # no attempt streamed the reply again
            _, message_id, self._cut = self._lost
            self._lost = None
            out += self._close_message(message_id)
        elif self._rewind is not None:
            for key in self._rewind.unfinished():
                if key[0] == "call":
                    self._cut.add(key[1])
                    continue
                old = self._message.get((0, ""), "")
                out += [*self._close_message(old),
                        CustomEvent(name="agentloop.superseded", value={"messageId": old})]
                if text := self._rewind.repeated(key):
                    new = f"{self._run_id}-m{self._seq}-{key[0]}"
                    out += [*self._text(new, text, None), *self._close_message(new)]
        self._rewind = None
        out += self._cut_off(self._cut)
        self._cut = set()
        return out

    def _unheld(self) -> list[AgUiEvent]:
        """The held ends of calls that were not run again (the run ended first)."""
        held, self._held = self._held, {}
        return [e for event in held.values() for e in self._tool_result(event, None)]
