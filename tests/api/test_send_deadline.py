"""``SendDeadline``: one timer per stream; a send blocked past the deadline is cancelled, many
quick sends (together longer than the deadline) are not."""

from __future__ import annotations

import asyncio

import pytest

from app.delivery.send_deadline import SendDeadline


async def test_quick_sends_outlast_the_deadline_unharmed() -> None:
    deadline = SendDeadline(1.0)
    try:
        for _ in range(15):  # ~1.5 s of sends, each far below the deadline
            with deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.05)
    finally:
        deadline.close()
    assert not deadline.expired


async def test_a_blocked_send_is_cancelled_once_due() -> None:
    async def stream() -> bool:
        deadline = SendDeadline(0.3)
        try:
            with deadline:
                await asyncio.sleep(0.01)
            with deadline:
                await asyncio.sleep(30)  # a client that stopped reading
        except asyncio.CancelledError:
            assert deadline.expired
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            return True
        finally:
            deadline.close()
        return False

    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await asyncio.wait_for(stream(), 10) is True
    assert 0.3 <= loop.time() - start < 8


async def test_an_outside_cancel_is_not_mistaken_for_the_deadline() -> None:
    deadline_seen: list[bool] = []

    async def stream() -> None:
        deadline = SendDeadline(10)
        try:
            with deadline:
                await asyncio.sleep(30)
        finally:
            deadline_seen.append(deadline.expired)
            deadline.close()

    task = asyncio.create_task(stream())
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadline_seen == [False]
