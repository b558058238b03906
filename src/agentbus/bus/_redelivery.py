"""What a handler may read of the delivery it serves: whether it was delivered before, and
where its answer goes."""

from __future__ import annotations

import contextvars

__all__ = ["bind_redelivered", "bind_reply_address", "redelivered", "reply_address"]

_redelivered: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "agentbus_redelivered", default=None
)


_reply_address: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agentbus_reply_address", default=None
)


def bind_reply_address(value: str | None) -> None:
    """Record the delivery's AMQP ``reply_to`` in the current context: its own task."""
    _reply_address.set(value)


def reply_address() -> str | None:
    """Where the answer to the request being served goes: its AMQP ``reply_to`` (None: by
    its sender's routing key, or outside a delivery). For an answer sent later, from
    elsewhere (``Transport.send_reply``), by whoever records it now."""
    return _reply_address.get()


def bind_redelivered(value: bool | None) -> None:
    """Record the broker's redelivered flag in the current context: the delivery's own task."""
    _redelivered.set(value)


def redelivered() -> bool | None:
    """Whether the request being served here may have been delivered before.

    False: RabbitMQ guarantees this is its first delivery (no consumer had it), so no
    earlier run of it can have left anything behind. True: it came back (a consumer's
    channel closed or it was requeued; from a classic service queue, as a copy that
    counts its attempt). None: not known (outside a delivery).
    """
    return _redelivered.get()
