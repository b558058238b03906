"""Durable plans' reply queues: one opened ahead, and those of ended plans used again.

A durable plan's subtasks are answered on a queue of its own, which outlives the leader
(a leader taking the plan over reads the answers that came meanwhile) and which the
leader running the plan consumes alone (the lock: a second leader gets ``QueueInUse``).
Declaring it and starting the exclusive consumer costs two round trips, and deleting it
two more: on quorum queues a replicated group made and torn down per plan, more than the
rest of a short plan's journaling. A plan on its first delivery needs no particular name
(nothing was sent for it yet, and nobody else runs it), so it takes a queue held already:
one whose plan ended here (journaled: no leader goes on with it, and what comes to it
for that plan is answered to nobody and dropped), else one declared ahead under a random
name. Its begun record names the queue, and a leader taking it over, or resuming it,
opens that one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

from agentbus._exceptions import AgentBusError
from agentbus.bus import Transport

__all__ = ["PlanQueues", "Stop"]

Stop = Callable[[bool], Awaitable[None]]
"""Stops taking a plan's answers; ``await stop(True)`` also deletes its queue."""

IDLE_MAX: Final = 8
"""Queues of ended plans a leader keeps for the next plans; more are deleted."""


class PlanQueues:
    """Holds plans' reply queues (exclusive) for the plans to come: those of ended plans,
    and one opened ahead of its use."""

    def __init__(self, bus: Transport) -> None:
        self._bus = bus
        self._next: asyncio.Task[tuple[str, Stop]] | None = None
        self._idle: list[tuple[str, Stop]] = []
        self._deleting: set[asyncio.Task[None]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._idle)

    async def take(self) -> tuple[str, Stop]:
        """A plan queue held alone, with nothing waiting on it for a plan of this
        leader's: its name, and what stops taking from it."""
        if self._idle:
            return self._idle.pop()
        ready, self._next = self._next, asyncio.create_task(self._open())
        self._next.add_done_callback(_retrieved)
        if ready is not None:
            with contextlib.suppress(AgentBusError):
                return await ready
        return await self._open()

    def give_back(self, name: str, stop: Stop, ended: asyncio.Future[None]) -> None:
        """Take back the queue ``name`` of a plan that ended, once ``ended`` (its end's
        write to the journal) is done: whatever the queue holds for that plan leaves it,
        and it waits for the next plan, or is deleted. Not written, the queue keeps what
        it holds, for the leader that goes on from the journal."""
        if not ended.done():
            ended.add_done_callback(lambda _: self.give_back(name, stop, ended))
            return
        if ended.cancelled() or ended.exception() is not None:
            self._spawn(stop(False))
            return
        self._bus.release_all(name)
        if not self._closed and len(self._idle) < IDLE_MAX:
            self._idle.append((name, stop))
            return
        self._spawn(stop(True))

    def _spawn(self, stopping: Awaitable[None]) -> None:
        task = asyncio.ensure_future(stopping)
        self._deleting.add(task)
        task.add_done_callback(self._deleting.discard)

    async def aclose(self) -> None:
        """Delete the queues held for plans to come (or stop opening one), and wait for
        those being deleted."""
        self._closed = True
        ahead, self._next = self._next, None
        idle, self._idle = self._idle, []
        if ahead is not None:
            ahead.cancel()
            with contextlib.suppress(asyncio.CancelledError, AgentBusError):
                idle.append(await ahead)
        await asyncio.gather(
            *(stop(True) for _, stop in idle), *self._deleting, return_exceptions=True
        )

    async def _open(self) -> tuple[str, Stop]:
        name = f"plan-{uuid.uuid4().hex}"
        return name, await self._bus.reply_queue(name, hold=True, exclusive=True)


def _retrieved(task: asyncio.Task[tuple[str, Stop]]) -> None:
    if not task.cancelled():
        task.exception()  # a failed one is opened again when taken
