"""Messages as the in-memory broker holds them, and the dead letters it keeps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias

from agentbus.envelopes import Envelope, decode

__all__ = ["DeadLetter", "DeadLetterReason", "MemoryMessage", "Queued"]

DeadLetterReason: TypeAlias = Literal["rejected", "expired", "maxlen"]
"""Why a queue dead-lettered a message (RabbitMQ's ``x-death`` reasons)."""


@dataclass(frozen=True, slots=True)
class MemoryMessage:
    """A published message: the body bytes and the AMQP properties agentbus sets."""

    body: bytes
    message_id: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    type: str | None = None
    content_type: str | None = None
    app_id: str | None = None
    timestamp: datetime | None = None
    persistent: bool = False
    expiration: float | None = None
    """Per-message TTL in seconds, counted from the publish (AMQP ``expiration``)."""
    user_id: str | None = None
    headers: Mapping[str, object] | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message a queue dead-lettered: rejected, expired, or pushed out of a full queue."""

    queue: str
    exchange: str
    routing_key: str
    reason: DeadLetterReason
    message: MemoryMessage

    def decode(self) -> Envelope:
        """Decode the message body as an envelope.

        Raises:
            EnvelopeError: the body is not a valid envelope (often why it was rejected).
        """
        return decode(self.message.body, max_size=None, message_id=self.message.message_id)


@dataclass(frozen=True, slots=True)
class Queued:
    message: MemoryMessage
    exchange: str
    routing_key: str
    expires_at: float | None
    redelivered: bool = False
