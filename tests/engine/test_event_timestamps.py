"""Stored events' ``ts``: the shared per-second cache formats exactly as ``isoformat`` does."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from app.worker.sink import rfc3339_ms


def _reference(t: float) -> str:
    ms = int(t * 1000)
    text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def test_matches_isoformat_across_seconds_and_runs() -> None:
    rng = random.Random(11)
    times = [rng.uniform(0, 4e9) for _ in range(2000)]
    times += [1_700_000_000 + i / 1000 for i in range(2500)]  # consecutive ms, second edges
    for t in times:
        assert rfc3339_ms(t) == _reference(t)
    assert rfc3339_ms(0.0) == "1970-01-01T00:00:00.000Z"
