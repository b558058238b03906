"""Cancelling work on the bus: the ``cancel`` request, and why a skill's task was cancelled.

An agent serves the built-in ``cancel`` action by cancelling the task running the named
request with ``CancelCause.REQUEST``; ``cancel_cause`` reads the cause back from the
``CancelledError`` the skill sees. ``send_cancel`` sends that request: the leader for a
subtask it gives up, the gateway for an A2A task cancelled or timed out.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Any

from agentbus._exceptions import AgentBusError
from agentbus._logging import get_logger
from agentbus.bus import Transport
from agentbus.envelopes import BROADCAST, RequestEnvelope, RequestPayload

__all__ = ["CancelCause", "cancel_cause", "send_cancel"]

_log = get_logger("agentbus.agents")
# A cancel is best effort: on a stalled network its confirm is not awaited for long.
_CANCEL_TIMEOUT = 5.0


class CancelCause(enum.StrEnum):
    """Why a task was cancelled, carried as its cancel message (``Task.cancel(cause)``).

    A ``StrEnum``: a skill that prints its ``CancelledError`` reads the words.
    """

    REQUEST = "cancelled by request"
    """A ``cancel`` request for the request the task serves."""


def cancel_cause(exc: asyncio.CancelledError) -> CancelCause | None:
    """Return the cause a cancellation carries; None for one without (a shutdown, say)."""
    return next((arg for arg in exc.args if isinstance(arg, CancelCause)), None)


async def send_cancel(
    bus: Transport, message_id: str, *, holder: str | None = None, log: Any = None
) -> None:
    """Ask whoever runs the request ``message_id`` to stop it; never raises.

    Args:
        bus: The transport the request was sent on (the cancel goes from its agent id).
        message_id: The id of the request to stop.
        holder: The agent instance known to hold the request; None sends the cancel on
            broadcast, so whichever instance has it stops.
        log: The logger that says when the cancel could not be sent (default: the
            agents' logger).
    """
    cancel = RequestEnvelope(
        sender_id=bus.agent_id,
        receiver_id=holder or BROADCAST,
        payload=RequestPayload(action="cancel", parameters={"message_id": message_id}),
    )
    try:
        await bus.publish(cancel, persistent=False, mandatory=False, timeout=_CANCEL_TIMEOUT)
    except AgentBusError as exc:
        (log or _log).info("cancel not sent", message_id=message_id, error=str(exc))
