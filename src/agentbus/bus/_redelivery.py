"""What a handler may read of the delivery it serves: whether it was delivered before, and
where its answer goes; and what it may hold of it: its acknowledgement."""

from __future__ import annotations

import asyncio
import contextvars

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger

__all__ = [
    "ack_after",
    "bind_ack_gates",
    "bind_redelivered",
    "bind_reply_address",
    "held_written",
    "redelivered",
    "reply_address",
]

_log = get_logger("agentbus.bus")

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


_ack_gates: contextvars.ContextVar[list[asyncio.Future[None]] | None] = contextvars.ContextVar(
    "agentbus_ack_gates", default=None
)


def bind_ack_gates(*, held: bool = True) -> None:
    """Start the list of what the delivery's acknowledgement waits for: its own task
    (``held=False``: it was acknowledged already, long work, and nothing can hold it)."""
    _ack_gates.set([] if held else None)


async def held_written() -> bool:
    """Wait for what the acknowledgement of the delivery being served was held for
    (``ack_after``); return whether every write went in."""
    try:
        for gate in _ack_gates.get() or ():
            await asyncio.shield(gate)
    except AgentBusError as exc:
        _log.warning(
            "request left for redelivery: a write its answer stands on failed", error=str(exc)
        )
        return False
    return True


def ack_after(written: asyncio.Future[None]) -> bool:
    """Hold the acknowledgement of the request being served until ``written`` is done:
    its answer is sent meanwhile, and if ``written`` fails the request goes back to its
    queue, to run again from what was written (its requester may get the answer twice,
    under one correlation id). Returns False outside a delivery: nothing is held, and the
    caller waits for ``written`` itself.
    """
    gates = _ack_gates.get()
    if gates is None:
        return False
    gates.append(written)
    return True
