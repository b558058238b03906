"""A delivery as the bus reads and settles it, and the one place that settles it."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol

from agentbus._logging import get_logger
from agentbus.bus._stats import BusStats

__all__ = ["IncomingMessage", "Settle", "settle"]

_log = get_logger("agentbus.bus")


class IncomingMessage(Protocol):
    """A delivery as the dispatcher reads and settles it: aio-pika's, or the in-memory bus's."""

    @property
    def body(self) -> bytes: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def correlation_id(self) -> str | None: ...
    @property
    def reply_to(self) -> str | None: ...
    @property
    def routing_key(self) -> str | None: ...
    @property
    def type(self) -> str | None: ...
    @property
    def headers(self) -> Mapping[str, object] | None: ...
    @property
    def user_id(self) -> str | None: ...
    @property
    def redelivered(self) -> bool | None: ...

    async def ack(self) -> None: ...

    async def reject(self, *, requeue: bool = ...) -> None: ...

    async def nack(self, *, requeue: bool = ...) -> None: ...


class Settle(enum.Enum):
    """How a delivery ends: every path through the dispatcher returns one."""

    ACK = "ack"
    """Done: the queue forgets it."""
    DEAD_LETTER = "dead_letter"
    """A bad message: rejected without requeue, to the dead-letter queue."""
    REQUEUE = "requeue"
    """Worth another try: back to its queue (for another instance, or after a fault)."""
    LEFT = "left"
    """Nothing to do: it went back to its queue with its channel (a held answer let go)."""


async def settle(message: IncomingMessage, how: Settle, stats: BusStats) -> None:
    """Ack, dead-letter or requeue ``message``; a channel already gone is counted, not raised."""
    if how is Settle.LEFT:
        return
    try:
        if how is Settle.ACK:
            await message.ack()
        elif how is Settle.DEAD_LETTER:
            await message.reject(requeue=False)
            stats.dead_lettered += 1
        else:
            await message.nack(requeue=True)
    except Exception as exc:
        # The channel it came on is gone; the broker redelivers it, and the
        # de-duplication window keeps its effect from running twice.
        stats.settle_failures += 1
        _log.info("delivery not settled", how=how.value, error=repr(exc))
