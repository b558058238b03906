"""The leader agent: ``run_plan`` takes a plan and answers with its aggregate."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Final

import structlog

from agentbus._exceptions import (
    AgentBusError,
    BusClosed,
    ConnectionLost,
    InvalidParameters,
    QuestionClosed,
)
from agentbus.agents import AGENT_OFFLINE, Agent, answer_parameters, current_request, skill
from agentbus.bus import Journal, Topology, redelivered
from agentbus.envelopes import (
    ANSWER_ACTION,
    BROADCAST,
    ErrorCode,
    EventEnvelope,
    RequestEnvelope,
    question_origin,
    utcnow,
)
from agentbus.leader._aggregate import (
    PLAN_PROGRESS,
    Aggregate,
    PlanStatus,
    Progress,
    ProgressReport,
)
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._durable import (
    JOURNAL,
    PlanJournal,
    find_asker,
    journaled_state,
    lookup,
    plan_key,
)
from agentbus.leader._plan import Plan
from agentbus.leader._progress import ProgressSink
from agentbus.leader._questions import Given, PlanQuestions
from agentbus.leader._run import Cancellation, PlanRunner
from agentbus.leader._status import PlanState, RecentPlans
from agentbus.leader._takeover import TakeOver

__all__ = ["Leader"]

_OUTLINE_MAX: Final = 1000  # subtasks: a larger plan's first progress report names none
_SKEW: Final = timedelta(minutes=1)  # read a question's records from this long before it


class Leader(Agent):
    """Runs plans: each subtask goes to an agent offering its skill; results are aggregated.

    Progress goes out as ``plan_progress`` events, to the requester and on broadcast.
    ``durable`` (default: the ``durable_plans`` setting): each plan's steps are journaled
    on the broker (a stream shared by the leaders), so a plan whose leader dies goes on
    under another one, from where it was.
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
        self._runners: set[PlanRunner] = set()
        self._directory: SkillDirectory | None = None
        self._plan_questions = PlanQuestions(self.id, self.name, news=self._tell)

    def _delivery_limit(self) -> int | None:
        return self.settings.plan_delivery_limit

    async def on_start(self) -> None:
        self._directory = SkillDirectory(self.bus, registry=self._registry)
        await self.bus.subscribe(f"broadcast.event.{AGENT_OFFLINE}", self._on_offline)
        if self._durable:
            self._journal = await self.bus.journal(JOURNAL)

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
        assert self._directory is not None
        request = current_request()
        # The plan as decoded JSON (dicts and lists per subtask, ~600 bytes each) is not
        # read again once validated: let it go rather than keep it beside the plan model
        # for the whole run.
        request.payload.parameters.clear()
        structlog.contextvars.bind_contextvars(plan_id=plan.id)
        runner, journal, stop_replies = await self._runner(plan, request)
        self._runners.add(runner)
        self._log.info("plan started", plan_id=plan.id, subtasks=len(plan.subtasks))
        lost = False
        try:
            aggregate = await runner.run()
            if journal is not None:
                await journal.ended(aggregate.status.value)
        except (ConnectionLost, BusClosed):
            # The broker went under the plan: the bus puts the request back (no answer), and
            # the leader that takes it goes on from the journal, with the plan's queue.
            lost = True
            raise
        except asyncio.CancelledError:
            if journal is not None and runner.cancellation is Cancellation.REQUESTED:
                # Cancelled by request, not handed over: no other leader is to go on with it.
                with contextlib.suppress(AgentBusError):
                    await journal.ended(PlanStatus.FAILED.value)
            raise
        finally:
            self._runners.discard(runner)
            if stop_replies is not None:  # the plan's queue goes once its plan has ended
                await stop_replies(runner.cancellation is not Cancellation.HANDED_OVER and not lost)
        self._recent.add(aggregate)
        self._log.info(
            "plan ended", plan_id=plan.id, status=aggregate.status.value, **_totals(aggregate)
        )
        if self.metrics is not None:
            status = aggregate.status.value
            self.metrics.plans.labels(status).inc()
            self.metrics.plan_duration.labels(status).observe(aggregate.totals.wall_time)
            for outcome in aggregate.subtasks:
                self.metrics.subtasks.labels(outcome.skill, outcome.status.value).inc()
        return aggregate

    @skill
    async def plan_status(self, plan_id: str, within: float = 3600.0) -> PlanState:
        """Where a plan is: each subtask so far while it runs, the aggregate once it ended.

        Known here: the plans this leader runs or ended (kept ``plan_retention`` seconds);
        with durable plans, any plan in the leaders' journal begun in the last ``within``
        seconds, whichever leader ran it.
        """
        for runner in self._runners:
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

    async def _runner(
        self, plan: Plan, request: RequestEnvelope
    ) -> tuple[PlanRunner, PlanJournal | None, Callable[[bool], Awaitable[None]] | None]:
        assert self._directory is not None
        progress = self._sink_for(request.sender_id, request.message_id, plan)
        if self._journal is None:
            runner = PlanRunner(
                self.bus,
                plan,
                directory=self._directory,
                progress=progress,
                questions=self._plan_questions,
                request_id=request.message_id,
            )
            return runner, None, None
        journal = PlanJournal(self._journal, plan_key(request.message_id))
        # A first delivery (never handed to a leader before) has nothing in the journal:
        # reading it back, every plan's records of the last minutes, is skipped.
        restored = None if redelivered() is False else await journal.restore(request.timestamp)
        expect = [sent.message_id for sent in (restored.in_flight if restored else {}).values()]
        # Held: an answer leaves the queue once the journal has what came of it.
        stop_replies = await self.bus.reply_queue(journal.reply_queue, expect=expect, hold=True)
        try:
            await journal.begun(self.id, plan.model_dump(mode="json") if restored is None else None)
        except BaseException:
            # Not begun here: the plan's queue, and its answers, stay for whoever goes on.
            await stop_replies(False)
            raise
        if restored is not None:
            self._log.info(
                "plan taken over",
                plan_id=plan.id,
                leader_before=restored.leader,
                settled=len(restored.settled),
                in_flight=len(restored.in_flight),
            )
        reply_to = Topology(self.bus.settings.exchange).reply_queue(journal.reply_queue)
        takeover = TakeOver(self.bus, journal, restored=restored, reply_to=reply_to)
        runner = PlanRunner(
            self.bus,
            plan,
            directory=self._directory,
            progress=progress,
            takeover=takeover,
            questions=self._plan_questions,
            request_id=request.message_id,
        )
        return runner, journal, stop_replies

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
        if found.leader == self.id:
            raise AgentBusError(
                f"plan {found.plan_id!r} is being taken over: answer again in a moment",
                code=ErrorCode.AGENT_UNAVAILABLE,
                details={"question_id": question_id, "plan_id": found.plan_id},
            )
        # To the leader running the plan; its answer (or error) is this one's.
        forwarded = await self.bus.request(
            found.leader,
            ANSWER_ACTION,
            request.payload.parameters,
            timeout=self.settings.request_timeout,
        )
        return forwarded.result

    async def _on_offline(self, event: EventEnvelope) -> None:
        agent_id = event.payload.event_data.get("agent_id")
        if isinstance(agent_id, str):
            for runner in list(self._runners):
                runner.agent_offline(agent_id)

    def _sink_for(self, requester: str, request_id: str, plan: Plan) -> ProgressSink:
        # The first report also names every subtask, so a follower lists the pending ones.
        outline: list[dict[str, Any]] | None = None
        if len(plan.subtasks) <= _OUTLINE_MAX:
            outline = [
                {"id": s.id, "skill": s.skill, "depends_on": s.depends_on} for s in plan.subtasks
            ]

        async def publish(batch: list[Progress]) -> None:
            nonlocal outline
            last = batch[-1]
            report = ProgressReport(
                plan_id=last.plan_id,
                done=last.done,
                total=last.total,
                transitions=batch,
                request_id=request_id,
                outline=outline,
            )
            outline = None
            data = report.model_dump(mode="json", exclude_none=True)
            await asyncio.gather(
                *(
                    self.bus.emit(
                        PLAN_PROGRESS, data, receiver=receiver, persistent=False, mandatory=False
                    )
                    for receiver in (requester, BROADCAST)
                )
            )

        return publish


def _totals(aggregate: Aggregate) -> dict[str, Any]:
    totals = aggregate.totals
    return {"succeeded": totals.succeeded, "failed": totals.failed, "wall_time": totals.wall_time}
