"""Durable plans' reply queues, one opened ahead: a plan that begins takes it at once.

A durable plan's subtasks are answered on a queue of its own, which outlives the leader
(a leader taking the plan over reads the answers that came meanwhile) and which the
leader running the plan consumes alone (the lock: a second leader gets ``QueueInUse``).
Declaring it and starting the exclusive consumer costs two round trips, more than the
rest of a short plan's journaling. A plan on its first delivery needs no particular name
(nothing was sent for it yet, and nobody else runs it), so it takes a queue declared
ahead under a random name; its begun record names the queue, and a leader taking it
over, or resuming it, opens that one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable

from agentbus._exceptions import AgentBusError
from agentbus.bus import Transport

__all__ = ["PlanQueues", "Stop"]

Stop = Callable[[bool], Awaitable[None]]
"""Stops taking a plan's answers; ``await stop(True)`` also deletes its queue."""


class PlanQueues:
    """Opens plans' reply queues (held, exclusive) one ahead of their use."""

    def __init__(self, bus: Transport) -> None:
        self._bus = bus
        self._next: asyncio.Task[tuple[str, Stop]] | None = None

    async def take(self) -> tuple[str, Stop]:
        """A fresh plan queue, held alone: its name, and what stops taking from it."""
        ready, self._next = self._next, asyncio.create_task(self._open())
        self._next.add_done_callback(_retrieved)
        if ready is not None:
            with contextlib.suppress(AgentBusError):
                return await ready
        return await self._open()

    async def aclose(self) -> None:
        """Delete the queue opened ahead (or stop opening it)."""
        ahead, self._next = self._next, None
        if ahead is None:
            return
        ahead.cancel()
        with contextlib.suppress(asyncio.CancelledError, AgentBusError):
            _, stop = await ahead
            await stop(True)

    async def _open(self) -> tuple[str, Stop]:
        name = f"plan-{uuid.uuid4().hex}"
        return name, await self._bus.reply_queue(name, hold=True, exclusive=True)


def _retrieved(task: asyncio.Task[tuple[str, Stop]]) -> None:
    if not task.cancelled():
        task.exception()  # a failed one is opened again when taken
