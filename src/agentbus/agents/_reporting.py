"""What a running skill reports: progress and partial results (``in_progress``
responses, sent at once) and the usage its final response carries."""

from __future__ import annotations

import contextvars
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Final

from agentbus._exceptions import UsageError
from agentbus.envelopes import RequestEnvelope, ResponseEnvelope, ResponseStatus

__all__ = ["PROGRESS_STATES", "Reporter", "report_progress", "report_usage", "send_partial"]

PROGRESS_STATES: Final = ("started", "progress", "partial")
"""The ``state`` of an ``in_progress`` response's result (docs/wire.md)."""

Publish = Callable[[ResponseEnvelope], Awaitable[None]]

_reporter: contextvars.ContextVar[Reporter] = contextvars.ContextVar("agentbus_progress_reporter")


class Reporter:
    """One request's reports: progress and partial results go to its requester at once,
    in order; usage is summed for the final response."""

    __slots__ = ("_agent_id", "_publish", "_request", "_sequence", "usage")

    def __init__(self, request: RequestEnvelope, agent_id: str, publish: Publish) -> None:
        self._request = request
        self._agent_id = agent_id
        self._publish = publish
        self._sequence = 0
        self.usage: Counter[str] = Counter()
        """What the skill used, by unit (tokens_in, usd, ...), summed."""

    def bind(self) -> contextvars.Token[Reporter]:
        """Make this the reporter of the current context (the skill's task copies it)."""
        return _reporter.set(self)

    @staticmethod
    def unbind(token: contextvars.Token[Reporter]) -> None:
        """Undo ``bind``."""
        _reporter.reset(token)

    async def started(self) -> None:
        """Say that the work has begun here."""
        await self._send({"state": "started"})

    async def progress(self, fraction: float | None, message: str | None) -> None:
        """Say how far the work is."""
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise UsageError(f"progress fraction {fraction!r} is not between 0 and 1")
        await self._send({"state": "progress", "fraction": fraction, "message": message})

    async def partial(self, chunk: Any) -> None:
        """Send a part of the result now; ``seq`` numbers the parts from 0."""
        sequence, self._sequence = self._sequence, self._sequence + 1
        await self._send({"state": "partial", "seq": sequence, "chunk": chunk})

    def used(self, amounts: dict[str, float]) -> None:
        """Add to what the skill used."""
        for unit, amount in amounts.items():
            if not isinstance(amount, int | float) or not math.isfinite(amount) or amount < 0:
                raise UsageError(f"usage {unit}={amount!r} is not a finite amount >= 0")
        self.usage.update(amounts)

    async def _send(self, result: dict[str, Any]) -> None:
        reply = self._request.response(
            {"agent_id": self._agent_id, **result},
            sender_id=self._agent_id,
            status=ResponseStatus.IN_PROGRESS,
        )
        await self._publish(reply)


def _current() -> Reporter:
    try:
        return _reporter.get()
    except LookupError:
        raise UsageError("progress can only be reported from inside a running skill") from None


async def report_progress(fraction: float | None = None, message: str | None = None) -> None:
    """From inside a skill: tell the requester how far the work is.

    It arrives as an ``in_progress`` response: ``bus.request(..., on_progress=...)``
    sees it, ``agentbus request`` prints it, a plan reports it as a ``progress`` transition.

    Args:
        fraction: How much is done, from 0 to 1; None if unknown.
        message: What is happening, for people.

    Raises:
        UsageError: not called from a running skill, or a fraction outside 0..1.
    """
    await _current().progress(fraction, message)


async def send_partial(chunk: Any) -> None:
    """From inside a skill: send part of the result now, before the skill returns.

    Parts arrive in order, each before the final response. ``chunk`` must be JSON data
    (dict, list, str, number, bool, None). A skill written as an async generator sends
    each item it yields this way.

    Raises:
        UsageError: not called from a running skill.
    """
    await _current().partial(chunk)


def report_usage(**amounts: float) -> None:
    """From inside a skill: add to what this request used (``tokens_in=812, usd=0.004``).

    The amounts are summed per unit and sent in the final response's ``metadata.usage``;
    the leader sums them per subtask and per plan, and a plan's ``budget`` caps them.

    Raises:
        UsageError: not called from a running skill, or an amount that is not >= 0.
    """
    _current().used(amounts)
