"""The run deadline and the default ``max_tokens`` through a real Worker on both backends."""

from __future__ import annotations

import time
from collections.abc import Callable

from app.store import Backend
from providers import fake
from providers.base import Provider
from providers.fake import FakeProvider
from tests.engine.harness import events, new_record, wait_end, worker


def recording(*steps: fake.ScriptItem
              ) -> tuple[list[FakeProvider], Callable[[str], tuple[Provider, str]]]:
    """A resolver whose providers are kept, to read what each was asked."""
    made: list[FakeProvider] = []

    def resolve(model: str) -> tuple[Provider, str]:
        made.append(FakeProvider(script=list(steps)))
        return made[-1], model.partition(":")[2]

    return made, resolve


async def test_a_model_that_never_stops_is_ended_at_the_server_deadline(
        backend: Backend) -> None:
    made, resolve = recording(fake.hanging("on and on"))
    rec, _ = await backend.create_run(new_record())
    async with worker(backend, resolve, run_timeout=0.5):
        end = await wait_end(backend, rec.id, timeout=30)
    assert (end.status, end.stop_reason) == ("failed", "error")
    assert end.error == ("run timed out: it passed its deadline of 0.5 s (the run's timeout) "
                         "and was stopped")
    assert made[0].closed == 1  # the provider stream was closed
    log = await events(backend, rec.id)
    assert [e["type"] for e in log].count("agent_end") == 1
    assert log[-1]["stop_reason"] == "error" and log[-1]["error"] == end.error


async def test_the_deadline_counts_from_the_first_start_so_a_resume_keeps_it(
        backend: Backend) -> None:
    made, resolve = recording(fake.text("too late"))
    record = new_record(timeout=50)
    record.started_at = time.time() - 100  # an earlier attempt started it 100 s ago
    rec, _ = await backend.create_run(record)
    async with worker(backend, resolve, run_timeout=3600):
        end = await wait_end(backend, rec.id, timeout=30)
    assert (end.status, end.stop_reason) == ("failed", "error")
    assert "deadline of 50 s" in (end.error or "")
    assert made[0].requests == []  # stopped before any model call
    assert end.started_at == record.started_at


async def test_a_run_timeout_longer_than_the_servers_is_cut_to_it(backend: Backend) -> None:
    _, resolve = recording(fake.hanging())
    rec, _ = await backend.create_run(new_record(timeout=3600))
    async with worker(backend, resolve, run_timeout=0.3):
        end = await wait_end(backend, rec.id, timeout=30)
    assert "deadline of 0.3 s" in (end.error or "")


async def test_default_max_tokens_where_the_run_sets_none(backend: Backend) -> None:
    made, resolve = recording(fake.text("a"))
    plain, _ = await backend.create_run(new_record())
    own, _ = await backend.create_run(new_record(max_tokens=7))
    async with worker(backend, resolve, default_max_tokens=123):
        await wait_end(backend, plain.id)
        await wait_end(backend, own.id)
    assert sorted(p.requests[0].max_tokens or 0 for p in made) == [7, 123]
    made.clear()
    off, _ = await backend.create_run(new_record())
    async with worker(backend, resolve, default_max_tokens=0):
        await wait_end(backend, off.id)
    assert made[0].requests[0].max_tokens is None
