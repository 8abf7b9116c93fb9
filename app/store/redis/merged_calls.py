"""Calls of one script, next to each other in one write, made one call of its merged form.

At 300 live streams a process writes ~9,000 event batches a second, and with the write window
(``AGENTLOOP_EVENT_FLUSH_MS``) ~20 of them share each write, each still its own ``EVALSHA``
of APPEND: per batch redis-server dispatches a script call, builds its ``KEYS``/``ARGV``
tables, and sends a pub/sub message that this process then reads and parses. APPEND_MANY
(``scripts.py``) writes every batch of the write in one call, exactly as APPEND would one by
one, answers a list of their replies, and sends their notes as one message::

    write: EVALSHA APPEND a, EVALSHA APPEND b, EVALSHA APPEND c
    ──▶   EVALSHA APPEND_MANY 3 a b c ─▶ [seq a, seq b, error c] ─▶ a, b, c settled
                                       ─▶ one note: "m", blank line, a's, blank line, b's

Only calls that are next to each other merge (a run's own calls keep their order with
everything else in the write), at most ``MOST`` in one. Each keeps its own answer: an error
reply of one (``FENCED``) is its alone; a failure of the merged call (a lost connection after
the one retry, a Redis error) is every one's. A call whose arguments cannot be sent fails
alone: the others then go out one by one. A merged call meets NOSCRIPT as any call does
(``LeanScripts`` loads the script through its object and calls it again).

Redis Cluster never merges: its calls go through ``ClusterScripts`` (a run's keys are in its
own slot, so two runs' batches cannot share a script).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from redis.commands.core import AsyncScript
from redis.exceptions import InvalidResponse

MOST = 64
"""Most calls in one merged call (a script runs alone in Redis: 64 APPENDs take ~1 ms there
at most on this machine, far less at a frame's size)."""


class Mergeable(Protocol):
    """What ``merge`` reads of a call (``lean_scripts._Call``)."""

    script: AsyncScript | None
    keys: list[Any]
    args: list[Any]
    future: asyncio.Future[Any]
    merge: Merged | None


C = TypeVar("C", bound=Mergeable)


class Merged:
    """How calls of one script merge: ``script`` is their merged form (``KEYS`` the calls'
    keys in order, ``ARGV`` their number then their arguments in order; replies as a list)."""

    __slots__ = ("script",)

    def __init__(self, script: AsyncScript) -> None:
        self.script = script


def merge(calls: list[C], make: Callable[[Merged, list[C]], C]) -> list[C]:
    """``calls`` with each run of two or more neighbours sharing one ``merge`` replaced by the
    call ``make`` builds for them (``merged_call`` gives its keys, args and how it answers)."""
    out: list[C] = []
    group: list[C] = []
    for call in calls:
        if group and (call.merge is not group[0].merge or len(group) == MOST):
            out += _closed(group, make)
            group = []
        if call.merge is None:
            out.append(call)
        else:
            group.append(call)
    return out + _closed(group, make) if group else out


def _closed(group: list[C], make: Callable[[Merged, list[C]], C]) -> list[C]:
    if len(group) < 2:
        return group
    merged = group[0].merge
    assert merged is not None
    return [make(merged, group)]


def merged_call(parts: Sequence[Mergeable], loop: asyncio.AbstractEventLoop
                ) -> tuple[list[Any], list[Any], asyncio.Future[Any]]:
    """The keys, args and future of the call that stands for ``parts``: its reply, a list,
    settles each part with its own element; its failure fails each."""
    keys_: list[Any] = []
    args: list[Any] = [len(parts)]
    for part in parts:
        keys_ += part.keys
        args += part.args
    future: asyncio.Future[Any] = loop.create_future()
    future.add_done_callback(lambda done: _answer(parts, done))
    return keys_, args, future


def _answer(parts: Sequence[Mergeable], done: asyncio.Future[Any]) -> None:
    if done.cancelled():
        for part in parts:
            part.future.cancel()
        return
    error = done.exception()
    reply = done.result() if error is None else None
    if error is None and (not isinstance(reply, list) or len(reply) != len(parts)):
        error = InvalidResponse(f"a merged call of {len(parts)} answered {reply!r:.200}")
    for n, part in enumerate(parts):
        if part.future.done():
            continue  # its caller gave up on it
        answer = error if error is not None else reply[n]  # type: ignore[index]
        if isinstance(answer, BaseException):
            part.future.set_exception(answer)
        else:
            part.future.set_result(answer)

