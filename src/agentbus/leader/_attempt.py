"""One attempt at a subtask: how it ended, why a subtask failed, who holds the work in flight."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any, Final

from agentbus._exceptions import AgentBusError, RemoteError
from agentbus.envelopes import ErrorCode, Question, ResponseEnvelope
from agentbus.leader._aggregate import SubtaskStatus

__all__ = ["Answered", "Asked", "AttemptResult", "Failed", "Flight", "Holders", "SubtaskError"]

# Errors that another try cannot mend.
_FINAL_CODES: Final = frozenset(
    {
        ErrorCode.INVALID_PARAMETERS,
        ErrorCode.UNKNOWN_ACTION,
        ErrorCode.NO_CAPABLE_AGENT,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.PAYLOAD_TOO_LARGE,
        ErrorCode.INVALID_ENVELOPE,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)
# Not a wire error code: the ``error.code`` of a subtask that never ran.
_SKIPPED: Final = "skipped"
# Nor this: the ``error.code`` of a step skipped by its condition (``when``).
_NOT_MET: Final = "condition_not_met"
# Nor this: the ``error.code`` of an approval step refused (or a question declined).
_REJECTED: Final = "rejected"


@dataclass(frozen=True, slots=True)
class SubtaskError:
    """Why a subtask (or one attempt at it) did not succeed: an error code and a message.

    On the wire (outcomes and progress) it is ``{"code", "message"}``, with ``"details"``
    when the agent's error envelope carried them.
    """

    code: str
    message: str
    details: dict[str, Any] | None = None
    final: bool = False
    """Another try cannot mend it, whatever its code (a refusal by a person)."""

    @classmethod
    def of(cls, exc: AgentBusError) -> SubtaskError:
        """Return the error an exception answers with; an agent's own details kept."""
        details = exc.details if isinstance(exc, RemoteError) else None
        return cls(str(exc.code), exc.message, details)

    @classmethod
    def skipped(cls, reason: str) -> SubtaskError:
        """Return the error of a subtask that never ran."""
        return cls(_SKIPPED, reason)

    @classmethod
    def not_met(cls) -> SubtaskError:
        """Return the error of a step whose condition (``when``) did not hold: skipped, its
        result null, and the plan still complete."""
        return cls(_NOT_MET, "its condition did not hold")

    @property
    def is_not_met(self) -> bool:
        """Whether this is a condition that did not hold (no failure: the step's choice)."""
        return self.code == _NOT_MET

    @classmethod
    def cancelled(cls, reason: str) -> SubtaskError:
        """Return the error of a subtask the plan's stop cancelled."""
        return cls(ErrorCode.CANCELLED.value, reason)

    @classmethod
    def missing_input(cls, reference: str) -> SubtaskError:
        """Return the error of an input the dependency's result does not have."""
        message = f"input {reference!r} is not in the dependency's result"
        return cls(ErrorCode.INVALID_PARAMETERS.value, message)

    @classmethod
    def deadline(cls) -> SubtaskError:
        """Return the error of an attempt the plan's deadline left no time for."""
        return cls(ErrorCode.TIMEOUT.value, "plan deadline passed")

    @classmethod
    def over_budget(cls, spent: dict[str, float], budget: dict[str, float]) -> SubtaskError:
        """Return the error of an attempt the plan's spent budget left no room for."""
        over = ", ".join(
            f"{unit} {spent.get(unit, 0):g} of {cap:g}" for unit, cap in budget.items()
        )
        return cls(ErrorCode.CANCELLED.value, f"plan budget spent ({over})")

    @classmethod
    def unanswered(cls, question_id: str) -> SubtaskError:
        """Return the error of a step whose question got no answer in time."""
        return cls(ErrorCode.TIMEOUT.value, f"no answer to question {question_id} in time")

    @classmethod
    def declined(cls, by: str, note: str = "") -> SubtaskError:
        """Return the error of an approval step refused (or a question declined) by ``by``."""
        message = f"refused by {by}" + (f": {note}" if note else "")
        return cls(_REJECTED, message, final=True)

    @classmethod
    def holder_offline(cls, holder: str | None) -> SubtaskError:
        """Return the error of an attempt whose agent went offline while holding it."""
        message = f"agent {holder} went offline while holding the subtask"
        return cls(ErrorCode.AGENT_UNAVAILABLE.value, message)

    @property
    def is_final(self) -> bool:
        """Return whether another try cannot mend it."""
        return self.final or self.code in _FINAL_CODES

    @property
    def status(self) -> SubtaskStatus:
        """Return the status a subtask ends with on this error."""
        if self.code in (_SKIPPED, _NOT_MET):
            return SubtaskStatus.SKIPPED
        if self.code == ErrorCode.CANCELLED:
            return SubtaskStatus.CANCELLED
        return SubtaskStatus.FAILED

    def to_wire(self) -> dict[str, Any]:
        """Return the error as outcomes and progress events carry it."""
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            wire["details"] = self.details
        return wire


@dataclass(frozen=True, slots=True)
class Answered:
    """The attempt's answer: the subtask's result, from ``agent_id``."""

    result: Any
    agent_id: str
    usage: dict[str, float] | None = None

    @classmethod
    def of(cls, reply: ResponseEnvelope) -> Answered:
        """Return the answer a response carries: its result, its sender, what it used."""
        return cls(reply.payload.result, reply.sender_id, _usage(reply))


@dataclass(frozen=True, slots=True)
class Failed:
    """The attempt failed; ``holder_gone``: its agent went offline, so try again at once."""

    error: SubtaskError
    holder_gone: bool = False


@dataclass(frozen=True, slots=True)
class Asked:
    """The attempt's agent asks a question before it answers (``agentbus.ask``)."""

    question: Question


AttemptResult = Answered | Failed | Asked


class Flight:
    """One request in flight for a subtask: who holds it, and whether they vanished."""

    __slots__ = ("holder", "message_id", "offline", "task")

    def __init__(self, message_id: str, task: asyncio.Task[Any] | None) -> None:
        self.message_id = message_id
        self.holder: str | None = None
        self.offline = False
        self.task = task


class Holders:
    """Which agent instance holds which request in flight, to move work on when one goes."""

    def __init__(self) -> None:
        self._flights: dict[str, Flight] = {}
        self._held_by: dict[str, set[str]] = {}

    def track(self, message_id: str, task: asyncio.Task[Any] | None) -> Flight:
        """Return a new flight for a request, waited on by ``task``."""
        flight = Flight(message_id, task)
        self._flights[message_id] = flight
        return flight

    def hand_to(self, flight: Flight, holder: str) -> bool:
        """Record that ``holder`` took the request; return whether another had it before."""
        previous, flight.holder = flight.holder, holder
        moved = previous is not None and previous != holder
        if previous is not None and moved:
            # The broker redelivered it: the old holder going offline must not move it on.
            self._held_by.get(previous, set()).discard(flight.message_id)
        self._held_by.setdefault(holder, set()).add(flight.message_id)
        return moved

    def release(self, flight: Flight) -> None:
        """Forget a flight that ended."""
        self._flights.pop(flight.message_id, None)
        if flight.holder is not None:
            self._held_by.get(flight.holder, set()).discard(flight.message_id)

    def gone(self, agent_id: str) -> list[Flight]:
        """Mark the flights an offline agent held, and return them (each once)."""
        lost: list[Flight] = []
        for message_id in self._held_by.pop(agent_id, set()):
            flight = self._flights.get(message_id)
            if flight is not None and not flight.offline and flight.task is not None:
                flight.offline = True
                lost.append(flight)
        return lost


def _usage(reply: ResponseEnvelope) -> dict[str, float] | None:
    # metadata.usage as the agent sent it; anything but a map of unit to amount is ignored.
    usage = (reply.metadata.model_extra or {}).get("usage")
    if not isinstance(usage, dict):
        return None
    amounts = {
        str(unit): float(amount)
        for unit, amount in usage.items()
        if isinstance(amount, int | float)
        and not isinstance(amount, bool)
        and math.isfinite(amount)
        and amount >= 0
    }
    return amounts or None
