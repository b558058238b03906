"""Whether the delivery being served had been delivered before, for its handler to read."""

from __future__ import annotations

import contextvars

__all__ = ["bind_redelivered", "redelivered"]

_redelivered: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "agentbus_redelivered", default=None
)


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
