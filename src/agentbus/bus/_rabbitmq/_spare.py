"""A channel opened ahead of its use: a plan's reply queue takes one without waiting for
the two round trips (``channel.open``, ``basic.qos``) a fresh one costs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aio_pika.abc import AbstractRobustChannel

__all__ = ["SpareChannel"]


class SpareChannel:
    """Hands out channels from ``open_``, each time opening the next one ahead."""

    def __init__(self, open_: Callable[[], Awaitable[AbstractRobustChannel]]) -> None:
        self._open = open_
        self._next: asyncio.Task[AbstractRobustChannel] | None = None

    async def take(self) -> AbstractRobustChannel:
        """The channel opened ahead if it is open, else one opened now."""
        ready, self._next = self._next, asyncio.ensure_future(self._open())
        self._next.add_done_callback(_retrieved)
        if ready is not None:
            with contextlib.suppress(Exception):
                channel = await ready
                if not channel.is_closed:
                    return channel
        return await self._open()

    def cancel(self) -> None:
        """Stop opening the next one (the bus closes: its connection closes what is open)."""
        if self._next is not None:
            self._next.cancel()


def _retrieved(task: asyncio.Task[AbstractRobustChannel]) -> None:
    if not task.cancelled():
        task.exception()  # a failed spare is opened again when taken
