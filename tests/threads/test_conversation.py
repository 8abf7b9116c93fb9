"""``app.runtime.thread.Thread``: the in-process conversation helper, with the same
semantics as the service's threads (a scripted provider, no service)."""

from __future__ import annotations

import asyncio

import pytest

from app import runtime
from app.runtime.thread import Thread, ThreadBusy
from providers.messages import AssistantMessage, UserMessage
from tests.threads.conftest import EchoProvider


def transcript(chat: Thread) -> list[str]:
    out = []
    for m in chat.messages:
        if isinstance(m, UserMessage):
            out.append(f"u:{m.content}")
        elif isinstance(m, AssistantMessage):
            out.append(f"a:{m.text()}")
    return out


def thread(provider: EchoProvider) -> Thread:
    chat: Thread = runtime.Thread(model="echo:m", provider=provider, toolset="none")
    return chat


async def test_turns_continue_the_conversation() -> None:
    provider = EchoProvider(jitter=0)
    chat = thread(provider)
    first = await chat.send("hello")
    assert first.text == "echo: hello" and not chat.busy
    await chat.send("again")
    assert transcript(chat) == ["u:hello", "a:echo: hello", "u:again", "a:echo: again"]
    assert len(provider.requests[-1].messages) == 3  # the history went to the model


async def gated() -> tuple[Thread, EchoProvider, asyncio.Event]:
    import threading

    provider = EchoProvider(jitter=0, gate=threading.Event())
    return thread(provider), provider, asyncio.Event()


async def test_enqueue_steer_and_reject_while_busy() -> None:
    chat, provider, _ = await gated()
    first = asyncio.create_task(chat.send("one"))
    while not provider.requests:
        await asyncio.sleep(0)  # until the first model call is under way
    with pytest.raises(ThreadBusy):
        await chat.send("no", multitask="reject")
    second = asyncio.create_task(chat.send("two"))
    steer = asyncio.create_task(chat.send("left", multitask="steer"))
    await asyncio.sleep(0)
    assert provider.gate is not None
    provider.gate.set()
    results = await asyncio.gather(first, second, steer)
    assert len({id(r) for r in results}) == 1  # one run took all three
    assert [t for t in transcript(chat) if t.startswith("u:")] == ["u:one", "u:left", "u:two"]


async def test_interrupt_continues_from_the_history() -> None:
    chat, provider, _ = await gated()
    first = asyncio.create_task(chat.send("one"))
    while not provider.requests:
        await asyncio.sleep(0)
    second = asyncio.create_task(chat.send("instead", multitask="interrupt"))
    aborted = await first
    assert aborted.stop_reason == "aborted"
    assert provider.gate is not None
    provider.gate.set()
    reply = await second
    assert reply.text == "echo: instead"
    assert [t for t in transcript(chat) if t.startswith("u:")] == ["u:one", "u:instead"]
    await chat.idle()
    assert not chat.busy
