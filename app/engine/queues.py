"""The loop's view of a steering or follow-up queue.

``take`` moves messages out of the queue into an in-flight set; the loop ``ack``s them once they
are injected into the conversation, or ``release``s them (back to the head of the queue, in
order) when the run is aborted before that. A backend that crashes between ``take`` and ``ack``
returns in-flight messages to the queue on recovery, so none is lost or applied twice.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from providers.messages import UserMessage

QueueMode: TypeAlias = Literal["one-at-a-time", "all"]
QueueKind: TypeAlias = Literal["steer", "follow_up"]


@dataclass(slots=True, frozen=True)
class QueuedMessage:
    """A user message waiting for the loop, with the id the client got back."""

    id: str
    message: UserMessage


class MessageSource(Protocol):
    """One queue (steering or follow-up) as the loop uses it."""

    async def take(self, mode: QueueMode) -> list[QueuedMessage]:
        """The oldest message (``one-at-a-time``) or all of them (``all``); may be empty."""
        ...

    async def ack(self, taken: list[QueuedMessage]) -> None:
        """These were injected: forget them."""
        ...

    async def release(self, taken: list[QueuedMessage]) -> None:
        """These were not injected: put them back at the head of the queue, in order."""
        ...


class ListQueue:
    """An in-process ``MessageSource`` (``runtime.exec`` and tests)."""

    _ids = itertools.count(1)

    def __init__(self) -> None:
        self._items: deque[QueuedMessage] = deque()
        self.in_flight: list[QueuedMessage] = []

    def push(self, message: UserMessage | str) -> QueuedMessage:
        """Queue a message; returns it with its id."""
        msg = UserMessage(content=message) if isinstance(message, str) else message
        item = QueuedMessage(id=f"msg_{next(self._ids)}", message=msg)
        self._items.append(item)
        return item

    def __len__(self) -> int:
        return len(self._items)

    async def take(self, mode: QueueMode) -> list[QueuedMessage]:
        """See ``MessageSource.take``."""
        if not self._items:
            return []
        count = len(self._items) if mode == "all" else 1
        taken = [self._items.popleft() for _ in range(count)]
        self.in_flight.extend(taken)
        return taken

    async def ack(self, taken: list[QueuedMessage]) -> None:
        """See ``MessageSource.ack``."""
        for item in taken:
            self.in_flight.remove(item)

    async def release(self, taken: list[QueuedMessage]) -> None:
        """See ``MessageSource.release``."""
        for item in reversed(taken):
            self.in_flight.remove(item)
            self._items.appendleft(item)
