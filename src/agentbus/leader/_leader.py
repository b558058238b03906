"""The leader agent: ``run_plan`` takes a plan and answers with its aggregate."""

from __future__ import annotations

import asyncio
from typing import Any, Final

import structlog

from agentbus.agents._agent import Agent, current_request
from agentbus.agents._heartbeat import AGENT_OFFLINE
from agentbus.agents._skills import skill
from agentbus.envelopes import BROADCAST, EventEnvelope
from agentbus.leader._aggregate import PLAN_PROGRESS, Aggregate, Progress, ProgressReport
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._plan import Plan
from agentbus.leader._progress import ProgressSink
from agentbus.leader._run import PlanRunner

__all__ = ["Leader"]

_OUTLINE_MAX: Final = 1000  # subtasks: a larger plan's first progress report names none


class Leader(Agent):
    """Runs plans: each subtask goes to an agent offering its skill; results are aggregated.

    Progress goes out as ``plan_progress`` events, to the requester and on broadcast.
    """

    name = "leader"
    description = "Runs plans of subtasks over capable agents and aggregates their results"
    version = "1.0.0"
    concurrency = 8

    def __init__(self, *, registry: str = "registry", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._registry = registry
        self._runners: set[PlanRunner] = set()
        self._directory: SkillDirectory | None = None

    async def on_start(self) -> None:
        self._directory = SkillDirectory(self.bus, registry=self._registry)
        await self.bus.subscribe(f"broadcast.event.{AGENT_OFFLINE}", self._on_offline)

    @skill
    async def run_plan(self, plan: Plan) -> Aggregate:
        """Run a plan to its end and return the aggregate."""
        assert self._directory is not None
        request = current_request()
        structlog.contextvars.bind_contextvars(plan_id=plan.id)
        runner = PlanRunner(
            self.bus,
            plan,
            directory=self._directory,
            progress=self._sink_for(request.sender_id, request.message_id, plan),
        )
        self._runners.add(runner)
        self._log.info("plan started", plan_id=plan.id, subtasks=len(plan.subtasks))
        try:
            aggregate = await runner.run()
        finally:
            self._runners.discard(runner)
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
