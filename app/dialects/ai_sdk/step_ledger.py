"""What the page holds of the current step, so a park can leave it answerable.

``useChat`` sends an approval back by itself
(``lastAssistantMessageIsCompleteWithApprovalResponses``) only when every tool part of the
last step is finished or answered. A turn that parks on an
approval can hold server picks that have not run yet (they run after it, in the model's
order) or a server call whose nested loop parked (its part has preliminary output only): the
page could then never send its answer. So the response that ends at a park resets the step
(the SDK's ``reset-step`` drops the step's parts) and shows it again without those picks;
each is shown again when the run gets to it::

    park: … finish-step? ─ reset-step ─ the step's chunks minus the pending server picks ─ finish
    continuation: the first chunk of such a pick (its start, a preliminary output, its end)
                  comes after its tool-input-available, sent again

A continuation (the answer's stream, which starts after the park) does the same bookkeeping
at the park without sending anything: the page already has the reset step.
"""

from __future__ import annotations

from typing import Any

_NOT_PARTS = frozenset({"finish-step", "message-metadata", "start", "finish", "error", "abort"})
"""Chunks that add no part to the step."""


class StepLedger:
    """The current step's part-making chunks and its tool calls."""

    def __init__(self) -> None:
        self.chunks: list[dict[str, Any]] = []
        self.calls: dict[str, dict[str, Any]] = {}  # call id → its tool-input-available
        self.finished: set[str] = set()  # calls with a final output (or denied)
        self.again: dict[str, dict[str, Any]] = {}  # calls to show again before their next chunk

    def record(self, chunks: list[dict[str, Any]]) -> None:
        """Note what a batch of chunks did to the page's message."""
        for chunk in chunks:
            kind = chunk["type"]
            if kind == "start-step":
                self.chunks = []
                continue
            if kind in _NOT_PARTS:
                continue
            self.chunks.append(chunk)
            call_id = str(chunk.get("toolCallId"))
            if kind == "tool-input-available":
                self.calls[call_id] = chunk
            elif kind in ("tool-output-error", "tool-output-denied") or (
                    kind == "tool-output-available" and not chunk.get("preliminary")):
                self.finished.add(call_id)

    def reset(self, waiting: set[str]) -> list[dict[str, Any]]:
        """At a park: ``reset-step`` and the step again without its pending server picks
        (none of that when the step has none); they are shown again later."""
        in_step = {c.get("toolCallId") for c in self.chunks}
        pending = {i for i, c in self.calls.items() if c.get("providerExecuted")
                   and i in in_step and i not in self.finished and i not in waiting}
        if not pending:
            return []
        self.again.update({i: self.calls[i] for i in pending})
        self.chunks = [c for c in self.chunks if c.get("toolCallId") not in pending]
        return [{"type": "reset-step"}, *self.chunks]

    def shown(self, started: str | None, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``chunks`` with each held-back pick's input first, before its first chunk (or at
        its execution start, ``started``)."""
        if not self.again:
            return chunks
        out: list[dict[str, Any]] = []
        if started in self.again:
            out.append(self.again.pop(started))
        for chunk in chunks:
            held = self.again.pop(chunk.get("toolCallId") or "", None)
            if held is not None and chunk["type"] != "tool-input-available":
                out.append(held)
            out.append(chunk)
        return out
