"""Answers held on their reply queue until the requester has made them durable elsewhere."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from agentbus.bus._delivery import Settle

__all__ = ["HeldAnswers"]

_SETTLE_WAIT: Final = 5.0  # s: how long closing a queue waits for released answers' acks


class HeldAnswers:
    """The answers a bus holds unacknowledged, by the id of the request each answers.

    The dispatcher holds a matched answer from a reply queue opened with ``hold`` until
    ``release`` (acknowledged: it leaves the queue) or ``abandon``, once the queue's
    consumer has closed: the broker put the answer back with its channel, for whoever
    opens the queue next (requeued while the consumer still ran, it would come straight
    back to this bus, which waits for it no more).
    """

    def __init__(self) -> None:
        self._gates: dict[str, tuple[str, asyncio.Future[Settle], asyncio.Task[Any] | None]] = {}
        self._acking: dict[asyncio.Task[Any], str] = {}  # released, ack not sent yet

    def __len__(self) -> int:
        return len(self._gates)

    def __repr__(self) -> str:
        return f"<HeldAnswers held={len(self._gates)} acking={len(self._acking)}>"

    def hold(self, queue: str, message_id: str) -> asyncio.Future[Settle]:
        """Return how the answer to ``message_id`` from ``queue`` is to be settled, when told.

        Called from the task that handles the answer's delivery.
        """
        gate: asyncio.Future[Settle] = asyncio.get_running_loop().create_future()
        self._gates[message_id] = (queue, gate, asyncio.current_task())
        return gate

    def held(self, message_id: str) -> asyncio.Future[Settle] | None:
        """The gate of an answer held already: a copy of it came again (after a reconnect
        the broker redelivers what the closed channel held), to be settled with it."""
        entry = self._gates.get(message_id)
        return None if entry is None else entry[1]

    def drop(self, message_id: str) -> None:
        """Forget the gate of an answer that was not held after all."""
        self._gates.pop(message_id, None)

    def release(self, message_id: str) -> bool:
        """Let the answer to ``message_id`` be acknowledged; return whether one was held."""
        entry = self._gates.pop(message_id, None)
        if entry is None or entry[1].done():
            return False
        queue, gate, task = entry
        gate.set_result(Settle.ACK)
        if task is not None and not task.done():
            self._acking[task] = queue
            task.add_done_callback(self._acked)
        return True

    def release_from(self, queue: str) -> int:
        """Let every answer held from ``queue`` be acknowledged; return how many were."""
        held = [message_id for message_id, entry in self._gates.items() if entry[0] == queue]
        return sum(self.release(message_id) for message_id in held)

    def abandon(self, queue: str | None = None) -> None:
        """Let go of the answers held from ``queue`` (every queue: None), whose consumer
        has closed: they are back on it."""
        for message_id, (held_from, gate, _) in list(self._gates.items()):
            if queue is None or held_from == queue:
                del self._gates[message_id]
                if not gate.done():
                    gate.set_result(Settle.LEFT)

    async def acked(self, queue: str | None = None) -> None:
        """Wait (a few seconds at most) for the acks of the answers released from ``queue``
        (every queue: None): closing the consumer first would send them back."""
        tasks = {task for task, held_from in self._acking.items() if queue in (None, held_from)}
        if tasks:
            await asyncio.wait(tasks, timeout=_SETTLE_WAIT)

    def _acked(self, task: asyncio.Task[Any]) -> None:
        self._acking.pop(task, None)
