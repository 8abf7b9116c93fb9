"""``FreshRuns``: a created run's first event for ``FRESH_S`` seconds, at most ``MAX_FRESH``."""

from __future__ import annotations

from app.store.fresh_runs import FreshRuns
from app.store.records import StoredEvent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def event(n: int) -> StoredEvent:
    return StoredEvent(1, "run_created", b'{"seq":1,"n":%d}' % n)


def test_a_run_is_remembered_for_ttl_seconds_then_forgotten() -> None:
    clock = Clock()
    fresh = FreshRuns(ttl=5.0, clock=clock)
    fresh.add("run_a", "alpha", event(1))
    clock.now += 4.9
    made = fresh.get("run_a")
    assert made is not None and made.tenant == "alpha" and made.first == event(1)
    assert fresh.get("run_b") is None
    clock.now += 0.1
    assert fresh.get("run_a") is None
    fresh.add("run_b", "beta", event(2))  # each add drops what has expired
    assert len(fresh) == 1 and fresh.get("run_b") is not None


def test_at_most_limit_runs_are_kept_and_the_oldest_go_first() -> None:
    clock = Clock()
    fresh = FreshRuns(ttl=5.0, limit=3, clock=clock)
    for n in range(10):
        fresh.add(f"run_{n}", "t", event(n))
        clock.now += 0.01
    assert len(fresh) == 3
    assert [fresh.get(f"run_{n}") is not None for n in range(10)] == [False] * 7 + [True] * 3
    made = fresh.get("run_9")
    assert made is not None and made.first == event(9)
