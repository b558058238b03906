"""Where the dispatcher's replies go: the publisher seam, and sends that may find nobody."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeAlias

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus.bus._delivery import IncomingMessage
from agentbus.bus._stats import BusStats
from agentbus.envelopes import ErrorEnvelope, ResponseEnvelope

__all__ = ["Replier", "Reply", "ReplyPublisher"]

Reply: TypeAlias = ResponseEnvelope | ErrorEnvelope

_log = get_logger("agentbus.bus")


class ReplyPublisher(Protocol):
    """Sends replies: the RabbitMQ ``Publisher``, or the in-memory bus's."""

    async def publish_reply(
        self, reply: Reply, reply_to: str | None, body: bytes | None = None
    ) -> None: ...

    async def republish(self, message: IncomingMessage, headers: Mapping[str, int]) -> None: ...


class Replier:
    """Sends the dispatcher's replies; one the requester cannot get is counted, not raised."""

    def __init__(self, publisher: ReplyPublisher, stats: BusStats) -> None:
        self.publisher = publisher
        self._stats = stats

    async def try_send(self, reply: Reply, reply_to: str | None) -> None:
        """Send ``reply``; a failed send is counted and logged."""
        try:
            await self.publisher.publish_reply(reply, reply_to)
        except AgentBusError as exc:
            self._stats.replies_dropped += 1
            _log.info("reply not delivered", error=str(exc), correlation_id=reply.correlation_id)

    async def refuse(self, reply: ErrorEnvelope, reply_to: str | None) -> None:
        """Send the error that refuses a delivery, counted by its code."""
        self._stats.errors_sent[reply.payload.code] += 1
        await self.try_send(reply, reply_to)
