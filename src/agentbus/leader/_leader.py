"""The leader agent: ``run_plan`` takes a plan and answers with its aggregate."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

import structlog
from pydantic import BaseModel

from agentbus._exceptions import (
    AgentBusError,
    InvalidParameters,
    QuestionClosed,
)
from agentbus.agents import AGENT_OFFLINE, answer_parameters, current_request, skill
from agentbus.bus import Journal, redelivered, reply_address
from agentbus.envelopes import (
    EventEnvelope,
    RequestEnvelope,
    question_origin,
    utcnow,
)
from agentbus.leader._aggregate import (
    Aggregate,
)
from agentbus.leader._askers import Asker, find_asker
from agentbus.leader._conductor import RESUME_PLAN, Conductor
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._durable import JOURNAL, journaled_state, lookup
from agentbus.leader._parking import Origin
from agentbus.leader._plan import Plan
from agentbus.leader._questions import Given, PlanQuestions
from agentbus.leader._scheduling import ScheduleSkills
from agentbus.leader._status import PlanState, RecentPlans

__all__ = ["Leader"]

_SKEW: Final = timedelta(minutes=1)  # read a question's records from this long before it


class Leader(ScheduleSkills):
    """Runs plans: each subtask goes to an agent offering its skill; results are aggregated.

    Progress goes out as ``plan_progress`` events, to the requester and on broadcast.
    ``durable`` (default: the ``durable_plans`` setting): each plan's steps are journaled
    on the broker (a stream shared by the leaders), so a plan whose leader dies goes on
    under another one, from where it was. The leaders also run the schedules
    (``schedule_add``), one leader at a time (``ScheduleSkills``).
    """

    name = "leader"
    description = "Runs plans of subtasks over capable agents and aggregates their results"
    version = "1.0.0"
    concurrency = 8

    def __init__(
        self, *, registry: str = "registry", durable: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._registry = registry
        self._durable = self.settings.durable_plans if durable is None else durable
        self._recent = RecentPlans(self.settings.plan_retention)
        self._journal: Journal | None = None
        self._conductor: Conductor | None = None
        self._plan_questions = PlanQuestions(self.id, self.name, news=self._tell)
        self._builtins[RESUME_PLAN] = self._resume_plan

    def _delivery_limit(self) -> int | None:
        return self.settings.plan_delivery_limit

    async def on_stop(self) -> None:
        await super().on_stop()
        if self._conductor is not None:
            await self._conductor.aclose()

    async def on_start(self) -> None:
        await self.bus.subscribe(f"broadcast.event.{AGENT_OFFLINE}", self._on_offline)
        if self._durable:
            self._journal = await self.bus.journal(JOURNAL)
        self._conductor = Conductor(
            self.bus,
            leader_id=self.id,
            service=self.name,
            directory=SkillDirectory(self.bus, registry=self._registry),
            questions=self._plan_questions,
            journal=self._journal,
            park_after=self.settings.plan_park_after,
            ended=self._ended,
        )
        await self._start_schedules()

    @staticmethod
    def plan_of(action: str, parameters: dict[str, Any]) -> dict[str, Any] | None:
        """Return the plan a request to a leader runs, as its parameters carry it (JSON).

        None when ``action`` is not ``run_plan``, or its ``plan`` is not an object. A
        client sending plans on someone's behalf (the A2A gateway) follows the plan's
        ``plan_progress`` events by this plan's ``id``.
        """
        plan = parameters.get("plan")
        return plan if action == "run_plan" and isinstance(plan, dict) else None

    @skill
    async def run_plan(self, plan: Plan) -> Aggregate:
        """Run a plan to its end and return the aggregate."""
        request = current_request()
        # The plan as decoded JSON (dicts and lists per subtask, ~600 bytes each) is not
        # read again once validated: let it go rather than keep it beside the plan model
        # for the whole run.
        request.payload.parameters.clear()
        structlog.contextvars.bind_contextvars(plan_id=plan.id)
        self._log.info("plan started", plan_id=plan.id, subtasks=len(plan.subtasks))
        origin = Origin.of(request, reply_address())
        return await self._conductor_().run(plan, origin, redelivered=redelivered())

    @skill
    async def plan_status(self, plan_id: str, within: float = 3600.0) -> PlanState:
        """Where a plan is: each subtask so far while it runs, the aggregate once it ended.

        Known here: the plans this leader runs or ended (kept ``plan_retention`` seconds);
        with durable plans, any plan in the leaders' journal begun in the last ``within``
        seconds, whichever leader ran it.
        """
        for runner in self._conductor_().runners:
            if runner.plan.id == plan_id:
                done, outcomes = runner.snapshot()
                total = len(runner.plan.subtasks)
                return PlanState(
                    plan_id=plan_id,
                    state="running",
                    leader=self.id,
                    done=done,
                    total=total,
                    subtasks=outcomes,
                    questions=self._plan_questions.of_plan(plan_id),
                )
        aggregate = self._recent.get(plan_id)
        if aggregate is not None:
            return PlanState.ended(aggregate, self.id)
        if self._journal is not None:
            since = utcnow() - timedelta(seconds=within)
            found = await lookup(self._journal, plan_id, since)
            state = None if found is None else journaled_state(found)
            if state is not None:
                return state
        raise InvalidParameters(
            f"no plan {plan_id!r} is known to {self.id}: not running here, not ended here "
            "lately, and not in the leaders' journal"
            + ("" if self._journal is not None else " (plans are not durable)"),
            details={"plan_id": plan_id},
        )

    async def _answer_question(self, request: RequestEnvelope) -> Any:
        # A plan's question: to the step waiting here, or to the leader running the plan.
        answer = answer_parameters(request)
        origin = question_origin(answer.question_id)
        if origin is None or origin[0] != self.name:
            return await super()._answer_question(request)
        given = Given(answer.answer, answer.decline, request.sender_id)
        opened = self._plan_questions.answer(answer.question_id, given)
        if opened is not None:
            return {
                "question_id": answer.question_id,
                "plan_id": opened.plan_id,
                "subtask_id": opened.subtask_id,
                "accepted": True,
            }
        return await self._answer_elsewhere(request, answer.question_id, origin[1])

    async def _answer_elsewhere(
        self, request: RequestEnvelope, question_id: str, asked_at: datetime
    ) -> Any:
        found = None
        if self._journal is not None:
            found = await find_asker(self._journal, question_id, asked_at - _SKEW)
        if found is None or found.answered or found.ended:
            reason = "unknown" if found is None else "answered" if found.answered else "ended"
            raise QuestionClosed(
                f"no plan waits on question {question_id} ({reason})",
                details={"question_id": question_id, "reason": reason},
            )
        answer = answer_parameters(request)
        given = Given(answer.answer, answer.decline, request.sender_id)
        conductor = self._conductor_()
        if not found.parked:  # to the leader running the plan: its answer is this one's
            return await conductor.forward(found, question_id, given)
        # Parked: whichever leader takes resume_plan runs the plan on from its journal.
        await conductor.wake(found, question_id, given)
        return {
            "question_id": question_id,
            "plan_id": found.plan_id,
            "subtask_id": found.subtask_id,
            "accepted": True,
        }

    async def _resume_plan(self, request: RequestEnvelope) -> Any:
        resume = _Resume.model_validate(request.payload.parameters)
        asker = Asker(
            resume.plan_id,
            self.id,
            key=resume.plan_key,
            subtask_id=resume.subtask_id,
            began=resume.began,
            parked=True,
        )
        given = Given(resume.answer.value, resume.answer.declined, resume.answer.by)
        return await self._conductor_().resume(asker, resume.question_id, given)

    def _conductor_(self) -> Conductor:
        if self._conductor is None:
            raise AgentBusError(f"{self!r} has not started")
        return self._conductor

    def _ended(self, aggregate: Aggregate) -> None:
        self._recent.add(aggregate)
        self._log.info(
            "plan ended",
            plan_id=aggregate.plan_id,
            status=aggregate.status.value,
            **_totals(aggregate),
        )
        if self.metrics is not None:
            status = aggregate.status.value
            self.metrics.plans.labels(status).inc()
            self.metrics.plan_duration.labels(status).observe(aggregate.totals.wall_time)
            for outcome in aggregate.subtasks:
                self.metrics.subtasks.labels(outcome.skill, outcome.status.value).inc()

    async def _on_offline(self, event: EventEnvelope) -> None:
        agent_id = event.payload.event_data.get("agent_id")
        if isinstance(agent_id, str):
            for runner in list(self._conductor_().runners):
                runner.agent_offline(agent_id)


class _Given(BaseModel):
    value: Any = None
    declined: bool = False
    by: str


class _Resume(BaseModel):
    """The parameters of ``resume_plan`` (leaders send it to one another)."""

    plan_key: str
    plan_id: str
    subtask_id: str
    began: float | None = None
    question_id: str
    answer: _Given


def _totals(aggregate: Aggregate) -> dict[str, Any]:
    totals = aggregate.totals
    return {"succeeded": totals.succeeded, "failed": totals.failed, "wall_time": totals.wall_time}
