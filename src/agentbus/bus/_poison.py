"""Poison requests on classic service queues: count returns in a header, give up past a limit.

A quorum queue counts deliveries itself (``x-delivery-limit``). A classic queue keeps no
count, so a request that kills its consumer would come back forever. Here a redelivery
is not run: it is republished as a fresh copy one attempt further on (the
``x-agentbus-attempt`` header) and the original acked, until there have been more
returns than the limit; then it is dead-lettered with a ``processing_failed`` reply.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Mapping
from typing import Final, Protocol

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus.bus._delivery import IncomingMessage

__all__ = ["ATTEMPT_HEADER", "DeliveryLimit", "Republisher", "Verdict", "attempt_of"]

ATTEMPT_HEADER: Final = "x-agentbus-attempt"
"""The delivery a copy republished from a classic service queue starts at (absent: 1)."""

_log = get_logger("agentbus.bus")


class Republisher(Protocol):
    """Publishes a copy of a delivery (the bus's publisher)."""

    async def republish(self, message: IncomingMessage, headers: Mapping[str, int]) -> None: ...


class Verdict(enum.Enum):
    """What became of a redelivered request."""

    REPUBLISHED = "republished"
    """A copy one attempt further on is out: ack the original."""
    NOT_COUNTED = "not_counted"
    """The copy could not be published: requeue the original, to be counted next time."""
    POISON = "poison"
    """Returned more times than the limit: answer it failed, and dead-letter it."""


class DeliveryLimit:
    """Counts the returns of requests from classic service queues, up to ``limit``."""

    def __init__(self, limit: int, publisher: Republisher) -> None:
        self.limit = limit
        self._publisher = publisher
        self._originals: dict[str | None, tuple[IncomingMessage, asyncio.Event]] = {}
        """Message ids republished here whose original is not settled yet."""

    async def judge(self, message: IncomingMessage) -> Verdict:
        """Republish a redelivered ``message`` one attempt on, or call it poison."""
        attempt = attempt_of(message) + 1
        if attempt > self.limit + 1:
            _log.warning("poison message dead-lettered", deliveries=attempt - 1, limit=self.limit)
            return Verdict.POISON
        self._originals[message.message_id] = (message, asyncio.Event())
        try:
            await self._publisher.republish(message, {ATTEMPT_HEADER: attempt})
        except AgentBusError as exc:
            _log.info("redelivery not counted; requeued", error=str(exc))
            return Verdict.NOT_COUNTED
        return Verdict.REPUBLISHED

    async def wait_for_original(self, message: IncomingMessage) -> None:
        """Hold a copy that came back before its original was settled.

        Were the process to crash between the two, the original would come back too:
        two copies of one request.
        """
        entry = self._originals.get(message.message_id)
        if entry is not None and entry[0] is not message:
            await entry[1].wait()

    def settled(self, message: IncomingMessage) -> None:
        """Release the copy of ``message``, if it was republished, now that it is settled."""
        entry = self._originals.get(message.message_id)
        if entry is not None and entry[0] is message:
            del self._originals[message.message_id]
            entry[1].set()


def attempt_of(message: IncomingMessage) -> int:
    """Return which delivery of its request ``message`` is, by its attempt header."""
    value = (message.headers or {}).get(ATTEMPT_HEADER)
    return value if type(value) is int and value > 1 else 1
