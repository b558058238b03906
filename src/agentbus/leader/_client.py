"""Submit plans to a leader from Python, following their progress."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from agentbus._exceptions import AgentBusError
from agentbus.bus import Transport
from agentbus.envelopes import EventEnvelope
from agentbus.leader._aggregate import PLAN_PROGRESS, Aggregate, Progress, ProgressReport
from agentbus.leader._plan import Plan
from agentbus.leader._status import PlanState

__all__ = ["TASK_SUBTASK", "PlanClient"]

TASK_SUBTASK = "task"
"""The id of the one subtask of a plan made by ``PlanClient.run_task``."""
ProgressCallback = Callable[[Progress], Awaitable[None] | None]


class PlanClient:
    """Sends plans to the ``leader`` service and hands their progress events to callbacks."""

    def __init__(self, bus: Transport, *, leader: str = "leader") -> None:
        self._bus = bus
        self._leader = leader
        self._callbacks: dict[str, ProgressCallback] = {}
        self._subscribed = False
        self._watching = False

    async def run(
        self,
        plan: Plan | dict[str, Any],
        *,
        timeout: float = 600.0,
        on_progress: ProgressCallback | None = None,
    ) -> Aggregate:
        """Run ``plan`` on a leader and return its aggregate.

        Raises:
            RemoteError: the leader refused the plan (``invalid_parameters`` for an invalid one).
            RequestTimeout: no aggregate within ``timeout`` seconds.
        """
        plan = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        if on_progress is not None:
            await self._subscribe()
            self._callbacks[plan.id] = on_progress
        try:
            reply = await self._bus.request(
                self._leader, "run_plan", {"plan": plan.model_dump(mode="json")}, timeout=timeout
            )
        finally:
            self._callbacks.pop(plan.id, None)
        try:
            return Aggregate.model_validate(reply.result)
        except ValidationError as exc:
            raise AgentBusError(f"the leader's answer is not an aggregate: {exc}") from exc

    async def run_task(
        self,
        service: str,
        skill: str,
        parameters: dict[str, Any] | None = None,
        *,
        task_id: str | None = None,
        timeout: float = 600.0,
        on_progress: ProgressCallback | None = None,
    ) -> Aggregate:
        """Ask ``service`` for ``skill`` as a task: a plan of one subtask (``task``), run
        by a leader, under the id ``task_id`` (made up if None).

        Unlike a plain request, a task has a status to look up by its id while it runs
        and after it ended (``status``, ``agentbus plan status ID``, the leader's
        ``plan_status``), from any client: a requester that went away comes back for the
        result. With durable plans it also outlives its leader. Returns the aggregate;
        its one subtask holds the result, or the error.

        Raises:
            RemoteError: the leader refused the task (``invalid_parameters``).
            RequestTimeout: no aggregate within ``timeout`` seconds.
        """
        subtask = {
            "id": TASK_SUBTASK,
            "service": service,
            "skill": skill,
            "parameters": parameters or {},
            "timeout": timeout,
        }
        plan = {"subtasks": [subtask]} | ({"id": task_id} if task_id is not None else {})
        return await self.run(plan, timeout=timeout, on_progress=on_progress)

    async def status(self, plan_id: str, *, timeout: float = 10.0) -> PlanState:
        """Where the plan ``plan_id`` is: running (each subtask so far) or ended (with its
        aggregate), as a leader knows it (``Leader.plan_status``).

        Raises:
            RemoteError: no leader knows the plan (``invalid_parameters``).
        """
        reply = await self._bus.request(
            self._leader, "plan_status", {"plan_id": plan_id}, timeout=timeout
        )
        return PlanState.model_validate(reply.result)

    async def watch(self, plan_id: str, on_progress: ProgressCallback) -> None:
        """Hand every progress event of ``plan_id`` to ``on_progress`` from now on (from
        the broadcast ones: any client may follow any plan)."""
        self._callbacks[plan_id] = on_progress
        if not self._watching:
            await self._bus.subscribe(f"broadcast.event.{PLAN_PROGRESS}", self._on_event)
            self._watching = True

    async def _subscribe(self) -> None:
        if not self._subscribed:
            await self._bus.subscribe(f"agent.{self._bus.agent_id}.event", self._on_event)
            self._subscribed = True

    async def _on_event(self, event: EventEnvelope) -> None:
        if event.payload.event_name != PLAN_PROGRESS:
            return
        report = ProgressReport.model_validate(event.payload.event_data)
        callback = self._callbacks.get(report.plan_id)
        if callback is None:
            return
        for progress in report.transitions:
            result = callback(progress)
            if result is not None:
                await result
