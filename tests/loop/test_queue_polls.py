"""How often the loop asks the queues, and that asking less changes nothing it does.

Each poll is a store call (a ``TAKE`` script on Redis). Under the service the loop has a
``close_queues``, and a run with nothing queued ends on one close instead of polling steering
after its answer, then follow-ups, then steering again; a pick's own poll is not repeated by
its turn's. Where something is queued, the messages and their order are what the loop without
a close (``runtime.exec``) sends.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.engine import LoopConfig, run_loop
from app.engine.queues import ListQueue, QueuedMessage, QueueMode
from providers import fake
from providers.base import ResponseFormat
from providers.fake import FakeProvider
from providers.messages import UserMessage
from tests.loop.helpers import Run, default_registry
from tool_registry import build_menu


class CountingQueue(ListQueue):
    def __init__(self) -> None:
        super().__init__()
        self.takes = 0

    async def take(self, mode: QueueMode) -> list[QueuedMessage]:
        self.takes += 1
        return await super().take(mode)


class Closer:
    """The store's close: refused while either queue holds a message."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.calls = 0

    async def __call__(self) -> bool:
        self.calls += 1
        return not len(self.run.steering) and not len(self.run.follow_up)


async def serve(run: Run, closer: Closer | None, **config: Any) -> Run:
    """``drive`` with the service's ``close_queues`` (or none, as ``runtime.exec``)."""
    menu = build_menu(registry=default_registry())
    run.outcome = await run_loop(
        provider=run.provider, menu=menu, config=LoopConfig(model="m", **config),
        context=[], emit=run.events.append, prompts=[UserMessage(content="hi")],
        steering=run.steering, follow_up=run.follow_up, abort=run.abort, close_queues=closer)
    return run


def counted() -> Run:
    return Run(FakeProvider([fake.tool_calls(("add", {"a": 1, "b": 2})), fake.text("3")]),
               steering=CountingQueue(), follow_up=CountingQueue())


async def test_a_run_with_nothing_queued_polls_once_per_pick_and_ends_on_one_close() -> None:
    run = counted()
    closer = Closer(run)
    await serve(run, closer)
    assert run.outcome is not None and run.outcome.result == "3"
    steering, follow_up = run.steering, run.follow_up
    assert isinstance(steering, CountingQueue) and isinstance(follow_up, CountingQueue)
    # before the first model call, after the pick; none after the answer: the close decides
    assert (steering.takes, follow_up.takes, closer.calls) == (2, 0, 1)


async def test_without_a_close_the_loop_polls_as_before() -> None:
    run = counted()
    await serve(run, None)
    steering, follow_up = run.steering, run.follow_up
    assert isinstance(steering, CountingQueue) and isinstance(follow_up, CountingQueue)
    # the pick's poll stands for its turn's; after the answer: steering, follow-ups, steering
    assert (steering.takes, follow_up.takes) == (4, 1)


class QueueAtAnswer(list):  # type: ignore[type-arg]
    """Queues a steer and a follow-up as the first text answer starts streaming."""

    def __init__(self, run: Run) -> None:
        super().__init__()
        self.run = run
        self.done = False

    def append(self, event: object) -> None:
        super().append(event)
        if getattr(event, "type", "") == "message_update" and not self.done:
            self.done = True
            self.run.follow_up.push("follow-up")
            self.run.steering.push("steer")


@pytest.mark.parametrize("with_close", [True, False])
async def test_messages_queued_during_the_answer_are_taken_steer_first(with_close: bool) -> None:
    run = Run(FakeProvider([fake.text("a"), fake.text("b"), fake.text("c")]))
    run.events = QueueAtAnswer(run)
    closer = Closer(run) if with_close else None
    await serve(run, closer)
    assert len(run.provider.requests) == 3
    assert run.sent(1)[-1].content == "steer"
    assert run.sent(2)[-1].content == "follow-up"
    assert run.outcome is not None and run.outcome.result == "c"
    assert run.steering.in_flight == [] and run.follow_up.in_flight == []
    if closer is not None:
        assert closer.calls == 3  # refused twice (a message waited), then closed


async def test_a_judged_answer_still_polls_steering_before_it_is_judged() -> None:
    """With a response format the answer is judged after the turn; a steer taken in the turn's
    poll goes to the model instead of the corrective retry, as without a close."""
    for closer_on in (True, False):
        run = Run(FakeProvider([fake.text("not json"), fake.text('{"x": 1}'),
                                fake.text('{"x": 2}')]))
        run.events = QueueAtAnswer(run)
        closer = Closer(run) if closer_on else None
        await serve(run, closer, response_format=ResponseFormat(name="r", schema={
            "type": "object", "properties": {"x": {"type": "integer"}},
            "required": ["x"], "additionalProperties": False}))
        assert run.sent(1)[-1].content == "steer", closer_on
        assert run.sent(2)[-1].content == "follow-up", closer_on
        assert run.outcome is not None and run.outcome.output == {"x": 2}
