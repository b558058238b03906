"""Submit plans to a leader from Python, following their progress."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from agentbus._exceptions import AgentBusError, QuestionDeclined
from agentbus._logging import get_logger
from agentbus.bus import QuestionHandler, Transport
from agentbus.envelopes import EventEnvelope, Question
from agentbus.leader._aggregate import PLAN_PROGRESS, Aggregate, Progress, ProgressReport
from agentbus.leader._plan import Plan
from agentbus.leader._schedule import Schedule
from agentbus.leader._schedule_book import ScheduleListing, ScheduleState
from agentbus.leader._status import PlanState

__all__ = ["TASK_SUBTASK", "PlanClient"]

_log = get_logger("agentbus.leader")

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
        self._subscribing = asyncio.Lock()  # concurrent first runs subscribe once

    async def run(
        self,
        plan: Plan | dict[str, Any],
        *,
        timeout: float = 600.0,
        on_progress: ProgressCallback | None = None,
        on_question: QuestionHandler | None = None,
    ) -> Aggregate:
        """Run ``plan`` on a leader and return its aggregate.

        A step that asks a question (its agent's, or an approval step's) waits for an
        answer: ``on_question`` is awaited with each and returns the answer (raising
        ``QuestionDeclined`` declines it); without it, answer from anywhere
        (``answer``, ``agentbus answer``) while the plan waits. ``timeout`` covers the
        whole run, the waits included.

        Raises:
            RemoteError: the leader refused the plan (``invalid_parameters`` for an invalid one).
            RequestTimeout: no aggregate within ``timeout`` seconds.
        """
        plan = plan if isinstance(plan, Plan) else Plan.model_validate(plan)
        answering: set[asyncio.Task[None]] = set()
        if on_progress is not None or on_question is not None:
            await self._subscribe()
            self._callbacks[plan.id] = _follower(self, on_progress, on_question, answering)
        try:
            reply = await self._bus.request(
                self._leader, "run_plan", {"plan": plan.model_dump(mode="json")}, timeout=timeout
            )
        finally:
            self._callbacks.pop(plan.id, None)
            for task in answering:
                task.cancel()
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
        on_question: QuestionHandler | None = None,
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
        return await self.run(
            plan, timeout=timeout, on_progress=on_progress, on_question=on_question
        )

    async def answer(
        self,
        question: Question | str,
        answer: Any = None,
        *,
        decline: bool = False,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """Answer a plan's question (from its progress or ``status``): the step waiting
        on it goes on. Returns what the leader says (``accepted``, the plan and step).

        Raises:
            QuestionClosed: no plan waits on it (unknown, answered, or the plan ended).
            RemoteError: the answer does not fit (an approval that is not one).
        """
        reply = await self._bus.answer(question, answer, decline=decline, timeout=timeout)
        result: dict[str, Any] = reply.result
        return result

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

    async def add_schedule(
        self, schedule: Schedule | dict[str, Any], *, replace: bool = False, timeout: float = 10.0
    ) -> ScheduleState:
        """Add a schedule (a plan or a request run every N seconds, on a cron expression,
        or once): kept by the leaders, each tick run once. ``replace`` one of that name.

        Raises:
            ValidationError: ``schedule`` is not a valid schedule.
            RemoteError: the leader refused it (``invalid_parameters``: the name is taken).
        """
        schedule = schedule if isinstance(schedule, Schedule) else Schedule.model_validate(schedule)
        parameters = {
            "schedule": schedule.model_dump(mode="json", by_alias=True, exclude_none=True),
            "replace": replace,
        }
        reply = await self._bus.request(self._leader, "schedule_add", parameters, timeout=timeout)
        return ScheduleState.model_validate(reply.result)

    async def schedules(self, *, timeout: float = 10.0) -> ScheduleListing:
        """Every schedule, with its next tick and its last runs."""
        reply = await self._bus.request(self._leader, "schedule_list", {}, timeout=timeout)
        return ScheduleListing.model_validate(reply.result)

    async def remove_schedule(self, name: str, *, timeout: float = 10.0) -> bool:
        """Remove the schedule ``name``; return whether there was one."""
        reply = await self._bus.request(
            self._leader, "schedule_remove", {"name": name}, timeout=timeout
        )
        return bool(reply.result.get("removed"))

    async def watch(self, plan_id: str, on_progress: ProgressCallback) -> None:
        """Hand every progress event of ``plan_id`` to ``on_progress`` from now on (from
        the broadcast ones: any client may follow any plan)."""
        self._callbacks[plan_id] = on_progress
        async with self._subscribing:
            if not self._watching:
                await self._bus.subscribe(f"broadcast.event.{PLAN_PROGRESS}", self._on_event)
                self._watching = True

    async def _subscribe(self) -> None:
        async with self._subscribing:
            if not self._subscribed:
                await self._bus.subscribe(f"agent.{self._bus.agent_id}.event", self._on_event)
                self._subscribed = True

    async def _answer_with(self, on_question: QuestionHandler, question: Question) -> None:
        try:
            value = await on_question(question)
        except QuestionDeclined:
            await self.answer(question, decline=True)
            return
        await self.answer(question, value)

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


def _follower(
    client: PlanClient,
    on_progress: ProgressCallback | None,
    on_question: QuestionHandler | None,
    answering: set[asyncio.Task[None]],
) -> ProgressCallback:
    # Progress to the caller's callback; each question to on_question, answered off the
    # event's path (a person may take minutes).
    async def follow(progress: Progress) -> None:
        if on_progress is not None:
            shown = on_progress(progress)
            if shown is not None:
                await shown
        if on_question is not None and progress.transition == "input_required":
            question = Question.model_validate((progress.detail or {}).get("question"))
            task = asyncio.create_task(client._answer_with(on_question, question))
            answering.add(task)
            task.add_done_callback(_answered(answering))

    return follow


def _answered(answering: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        answering.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.warning("plan question not answered", error=str(task.exception()))

    return done
