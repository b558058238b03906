"""A step's tries: attempts to its end, retried with backoff, its questions answered.

What every kind of step shares: a plain one, each item of a mapped one, and a planner
whose answer is a fragment. Each try goes through the ``AttemptSender``; a question its
agent asks, through ``Conversing``; the plan's deadline and budget bound them all.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentbus.leader._attempt import Answered, Asked, AttemptResult, Failed, SubtaskError
from agentbus.leader._conversing import Conversing
from agentbus.leader._durable import Sent
from agentbus.leader._limits import Limits
from agentbus.leader._plan import Subtask
from agentbus.leader._record import SubtaskRecord
from agentbus.leader._sender import AttemptSender, Emit
from agentbus.leader._takeover import TakeOver

__all__ = ["Steps"]


class Steps:
    """Tries the steps of one plan run.

    Args:
        sender: Sends each attempt.
        conversing: Answers a step's questions.
        limits: The plan's deadline, budget and backoff.
        emit: Reports a step's retries.
        takeover: A durable plan's journal, and what an earlier leader left of it.
    """

    def __init__(
        self,
        sender: AttemptSender,
        conversing: Conversing,
        limits: Limits,
        emit: Emit,
        takeover: TakeOver | None,
    ) -> None:
        self._sender = sender
        self._conversing = conversing
        self._limits = limits
        self._emit = emit
        self._takeover = takeover

    def __repr__(self) -> str:
        return "<Steps>"

    async def attempts(
        self, subtask: Subtask, record: SubtaskRecord, parameters: dict[str, Any]
    ) -> AttemptResult:
        """Try ``subtask`` as ``record`` (the step, or one item of a mapped step) until it
        is answered, fails for good, or has no tries left; its questions answered."""
        tried: set[str] = set()
        in_flight = self._in_flight(record)
        result = await self._conversing.resumed(subtask, record, tried)
        while True:
            if result is None:
                record.attempts += 1
                result = await self._attempt(subtask, parameters, record, tried, in_flight)
                in_flight = None
            while isinstance(result, Asked):
                result = await self._conversing.converse(subtask, record, result.question, tried)
            if isinstance(result, Answered) or self._limits.is_last_try(
                result.error, record.attempts, subtask.retries
            ):
                return result
            self._emit(record, "retrying", error=result.error)
            if not result.holder_gone:
                await asyncio.sleep(self._limits.backoff(record.attempts))
            result = None

    def _in_flight(self, record: SubtaskRecord) -> Sent | None:
        in_flight = None if self._takeover is None else self._takeover.in_flight(record.id)
        if in_flight is not None:  # another leader's attempt: asked again under its id
            record.attempts = in_flight.attempt - 1
        return in_flight

    async def _attempt(
        self,
        subtask: Subtask,
        parameters: dict[str, Any],
        record: SubtaskRecord,
        tried: set[str],
        in_flight: Sent | None = None,
    ) -> AttemptResult:
        timeout = subtask.timeout
        left = self._limits.seconds_left()
        if left is not None:
            timeout = min(timeout, left)
        if timeout <= 0:
            return Failed(SubtaskError.deadline())
        over_budget = self._limits.over_budget()
        if over_budget is not None:
            return Failed(over_budget)
        return await self._sender.send(
            subtask, parameters, record, tried, timeout=timeout, in_flight=in_flight
        )
