"""A run's token budget (``max_total_tokens``): once its model calls have spent it, no further
call is made and the run ends ``budget`` (issue 32)."""

from __future__ import annotations

from app.engine import LoopConfig
from providers import fake
from tests.loop.helpers import drive


async def test_a_spent_budget_ends_the_run_before_the_next_model_call() -> None:
    calls = [fake.tool_calls(("add", {"a": 1, "b": 1}))] * 5  # 15 tokens a call
    run = await drive(list(calls), config=LoopConfig(model="m", max_total_tokens=40))
    assert len(run.provider.requests) == 3  # 15, 30, then 45: the call that crossed it
    assert run.outcome is not None and run.outcome.stop_reason == "budget"
    assert run.events[-1].stop_reason == "budget"  # type: ignore[union-attr]
    assert run.outcome.usage.input_tokens + run.outcome.usage.output_tokens == 45
    assert [e.type for e in run.events].count("tool_execution_end") == 3  # its picks ran


async def test_an_answer_within_the_budget_is_a_plain_stop() -> None:
    run = await drive([fake.text("done")], config=LoopConfig(model="m", max_total_tokens=15))
    assert run.outcome is not None and run.outcome.stop_reason == "stop"
