"""Projection cost per stored event, per toolkit dialect (feed only: no I/O).

    .venv/bin/python bench/dialects.py

A run of 20,000 streamed text deltas (the common event) is decoded and fed through each
dialect's projector; the best of three passes is printed in microseconds per event, beside the
JSON decode every projected stream pays per stored event.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.dialects.ag_ui.projector import AgUiProjector
from app.dialects.ai_sdk.projector import UIMessageProjector
from app.dialects.tail import Projector
from app.engine.events import (
    Event,
    MessageStart,
    MessageUpdate,
    RunCreated,
    TurnStart,
    encode_event,
)
from providers.messages import AssistantMessage

N = 20_000


def stored_log() -> list[bytes]:
    head: list[Event] = [RunCreated(model="m"), TurnStart(turn=1),
                         MessageStart(message=AssistantMessage())]
    delta = MessageUpdate(delta={"kind": "text_delta", "content_index": 0, "text": "token "})
    events = head + [delta] * N
    return [encode_event(e, seq=i, run_id="run_x", ts="2026-01-01T00:00:00.000Z")
            for i, e in enumerate(events, 1)]


def per_event(make: Callable[[], Projector], events: list[dict[str, Any]]) -> float:
    best = float("inf")
    for _ in range(3):
        projector = make()
        start = time.perf_counter()
        for event in events:
            projector.feed(event)
        best = min(best, (time.perf_counter() - start) / len(events))
    return best * 1e6


def main() -> None:
    raw = stored_log()
    start = time.perf_counter()
    events = [orjson.loads(r) for r in raw]
    print(f"decode:  {(time.perf_counter() - start) / len(raw) * 1e6:.1f} us per event")
    print(f"ai-sdk:  {per_event(UIMessageProjector, events):.1f} us per event")
    print(f"ag-ui:   {per_event(lambda: AgUiProjector('t'), events):.1f} us per event")


if __name__ == "__main__":
    main()
