"""Answers a person sends from the dashboard: each one sent on the dashboard's own bus, and
what came of it (the work's result, a plan's leader taking it, the next question, an error).

An answer's reply is what the work does next, which may take as long as the work: the
answer goes out at once and its outcome is kept here, on the board, whenever it comes.
What the person answered is not kept (an authorization's answer may be a secret): only
that they answered, or declined.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

from agentbus._exceptions import AgentBusError, InputRequired, QuestionClosed
from agentbus._logging import get_logger
from agentbus.bus import Transport
from agentbus.envelopes import Question, utcnow

__all__ = ["Answers", "Outcome", "SentAnswer"]

_KEEP: Final = 20  # answers sent from here shown on the board, newest first
_SHOWN: Final = 2048  # characters of a result shown: the page is no place for a large one

_log = get_logger("agentbus.dashboard")


class Outcome(enum.StrEnum):
    """What came of an answer sent from the dashboard."""

    WAITING = "waiting"
    """Sent; the work has not answered yet."""
    RESULT = "result"
    """The work went on and answered: its result."""
    ACCEPTED = "accepted"
    """A plan's leader took the answer: the plan goes on (its progress says how)."""
    ASKED = "asked"
    """The work asks again: its next question, or the same one (the answer did not fit)."""
    CLOSED = "closed"
    """The question is not open (unknown, expired, answered already): the answer is refused."""
    FAILED = "failed"
    """The work, or the sending, ended in an error."""


@dataclass(slots=True)
class SentAnswer:
    """One answer sent from here, and what came of it."""

    question: Question | None
    """The question as the board knew it; None: answered by id, unknown here."""
    question_id: str
    by: str
    declined: bool
    at: datetime = field(default_factory=utcnow)
    outcome: Outcome = Outcome.WAITING
    result: Any = None
    error: AgentBusError | None = None
    next_question: Question | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> dict[str, Any]:
        """What the page shows of it (never the answer itself)."""
        question, error, asked = self.question, self.error, self.next_question
        return {
            "question_id": self.question_id,
            "text": None if question is None else question.text,
            "service": None if question is None else question.service,
            "plan_id": None if question is None else question.plan_id,
            "subtask_id": None if question is None else question.subtask_id,
            "by": self.by,
            "declined": self.declined,
            "at": self.at.isoformat(),
            "outcome": self.outcome.value,
            "result": None if self.outcome is not Outcome.RESULT else _shown(self.result),
            "error": None if error is None else {"code": error.code, "message": str(error)},
            "next_question_id": None if asked is None else asked.question_id,
        }


class Answers:
    """The answers sent from this dashboard, newest first, each with its outcome.

    Args:
        bus: The dashboard's bus: the answers go out on it, in its name.
        settled: Called once an answer's outcome is known.
        timeout: Seconds to wait for the work's reply to an answer.
    """

    def __init__(
        self, bus: Transport, *, settled: Callable[[SentAnswer], None], timeout: float
    ) -> None:
        self._bus = bus
        self._settled = settled
        self._timeout = timeout
        self._sent: collections.deque[SentAnswer] = collections.deque(maxlen=_KEEP)
        self._tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<Answers sent={len(self._sent)} waiting={len(self._tasks)}>"

    def send(self, question: Question | str, value: Any, *, decline: bool, by: str) -> SentAnswer:
        """Send the answer (or the decline) to ``question``; its outcome comes later."""
        known = None if isinstance(question, str) else question
        question_id = question if isinstance(question, str) else question.question_id
        sent = SentAnswer(known, question_id, by, decline)
        self._sent.appendleft(sent)
        task = asyncio.create_task(self._send(sent, question, value))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # The dashboard's audit line: who answered which question (not with what).
        _log.info(
            "question declined" if decline else "question answered",
            question_id=question_id,
            service=None if known is None else known.service,
            plan_id=None if known is None else known.plan_id,
            subtask_id=None if known is None else known.subtask_id,
            by=by,
        )
        return sent

    def views(self) -> list[dict[str, Any]]:
        return [sent.view() for sent in self._sent]

    async def aclose(self) -> None:
        """Stop waiting for the outcomes still to come (the answers are sent)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _send(self, sent: SentAnswer, question: Question | str, value: Any) -> None:
        try:
            reply = await self._bus.answer(
                question, value, decline=sent.declined, timeout=self._timeout
            )
        except InputRequired as asked:
            sent.outcome, sent.next_question = Outcome.ASKED, asked.question
        except QuestionClosed as exc:
            sent.outcome, sent.error = Outcome.CLOSED, exc
        except AgentBusError as exc:
            sent.outcome, sent.error = Outcome.FAILED, exc
        else:
            sent.result = reply.result
            sent.outcome = Outcome.ACCEPTED if _accepted(reply.result, sent) else Outcome.RESULT
        _log.info(
            "question answer outcome",
            question_id=sent.question_id,
            outcome=sent.outcome.value,
            code=None if sent.error is None else sent.error.code,
            by=sent.by,
        )
        sent.done.set()
        self._settled(sent)


def _accepted(result: Any, sent: SentAnswer) -> bool:
    # A leader takes a plan's answer at once and says so; the plan's work goes on.
    return (
        isinstance(result, dict)
        and result.get("accepted") is True
        and result.get("question_id") == sent.question_id
    )


def _shown(result: Any) -> str:
    text = orjson.dumps(result, option=orjson.OPT_INDENT_2).decode()
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}\n… (cut)"
