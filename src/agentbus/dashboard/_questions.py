"""The open questions of the team, and their answers from the page.

Fed by the ``question_asked`` and ``question_answered`` broadcasts that agents and leaders
send, and by the plans' progress (``input_required`` carries the plan's question,
``answered`` its end). A question is listed until it is answered (from anywhere), expires,
or its plan step or plan ends. Soft state, as the other boards: a question asked before
the dashboard started is not known here (a plan's are in its ``plan_status`` too).

A plan step's agent question is answered through the plan: the leader asks the plan's
people a question of its own (``plan_id``, ``subtask_id``) that stands for it, and hands
the answer on. The agent's question names the leader as its ``caller`` (the sender of
the request whose work asks); a leader is known as the sender of plan progress and the
asker of plan questions. So an agent question whose caller is a leader is hidden: its
plan's question is listed instead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from pydantic import ValidationError

from agentbus._exceptions import InvalidParameters, UsageError
from agentbus.agents import QUESTION_ANSWERED, QUESTION_ASKED
from agentbus.bus import Transport
from agentbus.dashboard._answering import Answers, Outcome, SentAnswer
from agentbus.envelopes import BROADCAST, EventEnvelope, Question, question_origin, utcnow
from agentbus.leader import ProgressReport

__all__ = ["QuestionBoard"]

_KEEP: Final = 500  # open questions kept at most: the oldest go first
_FORGET: Final = 4096  # ids of closed questions remembered, so a late "asked" is no revival
_WAIT: Final = 10.0  # s an answer's HTTP request waits for its outcome
_WORK_TIMEOUT: Final = 600.0  # s the work after an answer may take to reply
_STEP_ENDS: Final = frozenset({"succeeded", "failed", "skipped", "cancelled"})


@dataclass(slots=True)
class _Open:
    question: Question
    caller: str | None
    """Who sent the request whose work asks (an agent's question); None for a plan's."""
    sent: SentAnswer | None = None
    """An answer from here on its way."""

    def view(self) -> dict[str, Any]:
        # Every field, null where the wire leaves it out: the page reads one shape.
        view = dict.fromkeys(Question.model_fields) | self.question.model_dump(mode="json")
        view["caller"] = self.caller
        answering = self.sent is not None and self.sent.outcome is Outcome.WAITING
        view["answering"] = self.sent.by if answering and self.sent is not None else None
        return view


class QuestionBoard:
    """The open questions, oldest first; a person answers or declines them from here.

    Args:
        bus: The dashboard's bus; answers go out on it.
        on_change: Called whenever what the board shows changes.
        wait: Seconds ``answer`` waits for the outcome before it returns (it comes later).
        work_timeout: Seconds to wait for the work's reply to an answer.
    """

    def __init__(
        self,
        bus: Transport,
        *,
        on_change: Callable[[], None],
        wait: float = _WAIT,
        work_timeout: float = _WORK_TIMEOUT,
    ) -> None:
        self._bus = bus
        self._on_change = on_change
        self._wait = wait
        self._open: dict[str, _Open] = {}
        self._closed: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._leaders: set[str] = set()
        self._answers = Answers(bus, settled=self._settled, timeout=work_timeout)
        self._wake = asyncio.Event()
        self._sweeper: asyncio.Task[None] | None = None
        self.malformed = 0

    def __repr__(self) -> str:
        return f"<QuestionBoard open={len(self._open)} leaders={len(self._leaders)}>"

    async def start(self) -> None:
        """Follow the questions asked and answered on the bus."""
        await self._bus.subscribe(f"{BROADCAST}.event.{QUESTION_ASKED}", self._on_event)
        await self._bus.subscribe(f"{BROADCAST}.event.{QUESTION_ANSWERED}", self._on_event)
        self._sweeper = asyncio.create_task(self._expire_forever())

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self._answers.aclose()

    def snapshot(self) -> dict[str, Any]:
        """The open questions, oldest first (those answered through a plan left out), and
        the answers sent from here, newest first."""
        shown = [opened for opened in self._open.values() if not self._stands_behind(opened)]
        shown.sort(key=lambda opened: opened.question.asked_at)
        return {
            "questions": [opened.view() for opened in shown],
            "hidden": len(self._open) - len(shown),
            "answers": self._answers.views(),
        }

    async def answer(
        self, question_id: str, value: Any = None, *, decline: bool = False, by: str
    ) -> SentAnswer:
        """Send the answer to ``question_id`` (or decline it) on the dashboard's bus, in
        its name; return it with its outcome if that comes within ``wait`` seconds, else
        still waiting (the board shows the outcome when it comes).

        A question not on the board (asked before the dashboard started) may be answered
        by its id all the same: where its answer goes is in the id.

        Raises:
            InvalidParameters: ``question_id`` is not a question's id.
            UsageError: the question is answered through its plan (answer the plan's
                question), or an answer from here is on its way already.
        """
        if question_origin(question_id) is None:
            raise InvalidParameters(f"{question_id!r} is not a question's id")
        opened = self._open.get(question_id)
        if opened is not None and self._stands_behind(opened):
            raise UsageError(
                f"{question_id!r} is answered through its plan: answer the plan's question"
            )
        if opened is not None and opened.sent is not None and not opened.sent.done.is_set():
            raise UsageError(f"an answer to {question_id!r} is on its way already")
        target = question_id if opened is None else opened.question
        sent = self._answers.send(target, value, decline=decline, by=by)
        if opened is not None:
            opened.sent = sent
        self._on_change()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._wait):
                await sent.done.wait()
        return sent

    def take_report(self, leader: str, report: ProgressReport) -> None:
        """Follow a plan's progress (``PlanBoard`` hands each report on): its questions
        asked and answered, its steps and itself ending."""
        changed = False
        if leader not in self._leaders:
            self._leaders.add(leader)
            # Known as a leader now: the questions it caused its agents to ask are hidden.
            changed = any(opened.caller == leader for opened in self._open.values())
        for progress in report.transitions:
            detail = progress.detail or {}
            if progress.transition == "input_required":
                changed |= self._ask(detail.get("question"), caller=None)
            elif progress.transition == "answered":
                changed |= self._close(detail.get("question_id"))
            elif progress.transition in _STEP_ENDS:
                changed |= self._close_plan(report.plan_id, progress.subtask_id)
        if report.done >= report.total:
            changed |= self._close_plan(report.plan_id, None)
        if changed:
            self._on_change()

    async def _on_event(self, event: EventEnvelope) -> None:
        data = event.payload.event_data
        if event.payload.event_name == QUESTION_ASKED:
            caller = data.get("caller")
            caller = caller if isinstance(caller, str) else None
            changed = self._ask(data.get("question"), caller=caller)
        else:
            changed = self._close(data.get("question_id"))
        if changed:
            self._on_change()

    def _ask(self, data: object, *, caller: str | None) -> bool:
        try:
            question = Question.model_validate(data)
        except ValidationError:
            self.malformed += 1
            return False
        if question.question_id in self._closed or question.question_id in self._open:
            return False
        if question.plan_id is not None:
            self._leaders.add(question.asker)
        self._open[question.question_id] = _Open(question, caller)
        while len(self._open) > _KEEP:
            oldest = min(self._open.values(), key=lambda opened: opened.question.asked_at)
            self._close(oldest.question.question_id)
        self._wake.set()
        return True

    def _close(self, question_id: object) -> bool:
        if not isinstance(question_id, str):
            return False
        self._closed[question_id] = None
        while len(self._closed) > _FORGET:
            self._closed.popitem(last=False)
        opened = self._open.pop(question_id, None)
        if opened is None:
            return False
        if opened.question.plan_id is not None:
            self._close_stood_for(opened.question)
        return True

    def _close_plan(self, plan_id: str, subtask_id: str | None) -> bool:
        ended = [
            opened.question.question_id
            for opened in self._open.values()
            if opened.question.plan_id == plan_id
            and subtask_id in (None, opened.question.subtask_id)
        ]
        for question_id in ended:
            self._close(question_id)
        return bool(ended)

    def _close_stood_for(self, plan_question: Question) -> None:
        # The agent's question a plan's question stood for: the leader asked it in the
        # agent question's words, at its turn. Answered, its agent says so; unanswered
        # (the step timed out, the plan ended), nobody will answer it.
        for opened in list(self._open.values()):
            asked = opened.question
            if (
                asked.plan_id is None
                and opened.caller == plan_question.asker
                and (asked.text, asked.turn) == (plan_question.text, plan_question.turn)
            ):
                self._close(asked.question_id)

    def _stands_behind(self, opened: _Open) -> bool:
        """Whether ``opened`` is an agent's question that its plan's question stands for."""
        return opened.question.plan_id is None and opened.caller in self._leaders

    def _settled(self, sent: SentAnswer) -> None:
        opened = self._open.get(sent.question_id)
        if sent.outcome is Outcome.ASKED and sent.next_question is not None:
            self._ask(sent.next_question.model_dump(mode="json"), caller=self._bus.agent_id)
        # Taken (or refused as not open): the question is no longer open. A failure may
        # have been before or after it was taken: its agent's news decides.
        if sent.outcome is not Outcome.FAILED:
            self._close(sent.question_id)
        elif opened is not None and opened.sent is sent:
            opened.sent = None
        self._on_change()

    async def _expire_forever(self) -> None:
        while True:
            self._wake.clear()
            now = utcnow()
            expired = [
                opened.question.question_id
                for opened in self._open.values()
                if opened.question.expires_at is not None and opened.question.expires_at <= now
            ]
            for question_id in expired:
                self._close(question_id)
            if expired:
                self._on_change()
            ends = [o.question.expires_at for o in self._open.values() if o.question.expires_at]
            timeout = None if not ends else max((min(ends) - now) / timedelta(seconds=1), 0.01)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
