"""Run one plan: start what the graph allows, retry with backoff, fail over, cancel, aggregate.

A durable plan's journal and take-over are the ``TakeOver`` the runner is given; its
questions, the ``Conversing``; its mapped steps, the ``Mapper``."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

from agentbus._exceptions import UsageError
from agentbus._logging import get_logger
from agentbus.agents import CancelCause, cancel_cause
from agentbus.bus import Transport, current_trace
from agentbus.envelopes import Question, utcnow
from agentbus.leader._aggregate import Aggregate, SubtaskOutcome, SubtaskStatus
from agentbus.leader._attempt import Answered, AttemptResult, Failed, Holders, SubtaskError
from agentbus.leader._conditions import evaluate, truthy
from agentbus.leader._conversing import Conversing
from agentbus.leader._directory import SkillDirectory
from agentbus.leader._fragments import Expander
from agentbus.leader._graph import PlanGraph, Skip, Stop
from agentbus.leader._limits import Limits
from agentbus.leader._mapping import Mapper
from agentbus.leader._parking import PlanParked
from agentbus.leader._plan import Plan, Subtask, resolve_input
from agentbus.leader._progress import ProgressSink, ProgressStream
from agentbus.leader._questions import APPROVAL, PlanAsking, PlanQuestions
from agentbus.leader._record import SubtaskRecord, tally
from agentbus.leader._sender import AttemptSender
from agentbus.leader._status import Cancellation, RunState
from agentbus.leader._steps import Steps
from agentbus.leader._takeover import TakeOver

__all__ = ["Cancellation", "Nesting", "PlanRunner", "RunState"]

_log = get_logger("agentbus.leader")

_PARK: Final = "park"  # on the ended queue: every step left has waited ``park_after``


@dataclass(frozen=True, slots=True)
class Nesting:
    """Where a run stands in its plan: the plan's own (the defaults), or a fragment's: its
    steps' ids under ``prefix``, the plan's ``limits`` shared, ``depth`` fragments deep."""

    prefix: str = ""
    limits: Limits | None = None
    depth: int = 0


class PlanRunner:
    """Runs one validated plan on a transport and returns its aggregate; once.

    ``state`` says where the run is; ``stop_reason`` says why a stopped run stopped early
    (a critical subtask failed, the plan's deadline passed, or the leader is stopping);
    ``cancellation`` says why a run cancelled from outside was (None until it is).
    ``takeover``: a durable plan's journal, and what an earlier leader left of it;
    ``nesting``: this run is a fragment's, inside the plan's run (``Nesting``);
    ``requester``: the broker user of who asked for the plan (its files' reader).
    """

    def __init__(
        self,
        bus: Transport,
        plan: Plan,
        *,
        directory: SkillDirectory,
        progress: ProgressSink | None = None,
        retry_base: float = 0.2,
        retry_cap: float = 5.0,
        rng: random.Random | None = None,
        takeover: TakeOver | None = None,
        asking: PlanAsking | None = None,
        nesting: Nesting | None = None,
        requester: str | None = None,
    ) -> None:
        self.plan = plan
        self.state = RunState.PENDING
        self.stop_reason: str | None = None
        self.cancellation: Cancellation | None = None
        self.parked: list[Question] = []
        """The questions the plan parked on (state ``PARKED``)."""
        self._bus, self._directory, self._sink = bus, directory, progress
        self._nesting = nesting or Nesting()
        self._limits = self._nesting.limits or Limits(
            plan, retry_base=retry_base, retry_cap=retry_cap, rng=rng or random.Random()
        )
        self._graph = PlanGraph(plan)
        self._by_id = {subtask.id: subtask for subtask in plan.subtasks}
        prefix = self._nesting.prefix  # a fragment's steps: <the planner step>/<step>
        self._records = {s.id: SubtaskRecord(prefix + s.id, s.skill) for s in plan.subtasks}
        self._results: dict[str, Any] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}  # by subtask id, named after it
        self._ended: asyncio.Queue[asyncio.Task[None] | str] = asyncio.Queue()
        self._holders = Holders()
        self._takeover = takeover
        self._done = 0
        self._progress = ProgressStream(progress, plan_id=plan.id, total=len(plan.subtasks))
        self._log = _log.bind(plan_id=plan.id)
        self._sender = AttemptSender(
            bus,
            plan,
            requester=requester,
            directory=directory,
            holders=self._holders,
            emit=self._emit,
            takeover=takeover,
            trace=current_trace(),  # the run_plan request's, when a leader serves one
            log=self._log,
        )
        self._asking = asking or PlanAsking(PlanQuestions(bus.agent_id, "leader"), plan.id)
        self._conversing = Conversing(
            self._asking,
            self._sender,
            self._limits,
            self._emit,
            takeover,
            plan_id=plan.id,
            running=lambda: len(self._tasks),
            wake=lambda: self._ended.put_nowait(_PARK),
        )
        self._steps = Steps(self._sender, self._conversing, self._limits, self._emit, takeover)
        self._mapper = Mapper(
            self._steps.attempts, self._results, takeover, self._emit, self._limits.spend
        )
        depth = self._nesting.depth
        self._expander = Expander(plan, self._steps.attempts, self._fragment, takeover, depth)

    def __repr__(self) -> str:
        return (
            f"<PlanRunner plan_id={self.plan.id!r} state={self.state.value} "
            f"done={self._done}/{len(self._by_id)}>"
        )

    def snapshot(self) -> tuple[int, list[SubtaskOutcome]]:
        """How many subtasks have ended, and each one's outcome so far (a running plan)."""
        return self._done, [r.outcome() for r in self._records.values()]

    def agent_offline(self, agent_id: str) -> None:
        """Move on at once from the work an agent reported offline was holding."""
        self._directory.forget(agent_id)
        for flight in self._holders.gone(agent_id):
            # The attempt's task waits on the reply: cancelled, it sees ``offline`` and moves
            # on (a reply already in, or on its way, is lost with it: the step is tried again).
            assert flight.task is not None
            flight.task.cancel()

    async def run(self) -> Aggregate:
        """Run the plan to its end and return the aggregate.

        Raises:
            UsageError: this runner has run already; a runner runs one plan once.
        """
        if self.state is not RunState.PENDING:
            raise UsageError(
                f"the runner of plan {self.plan.id!r} has run already ({self.state.value}): "
                "make a new PlanRunner to run it again"
            )
        self.state = RunState.RUNNING
        started_at, started = utcnow(), time.monotonic()
        if self._nesting.limits is None:  # a fragment runs under the plan's limits
            self._limits.start(self.plan.deadline_at(started_at))
        async with self._progress:
            try:
                await self._schedule()
            except asyncio.CancelledError as exc:
                await self._cancelled(cancel_cause(exc))
                raise
            finally:
                self._conversing.stop_parking()
        if self._takeover is not None and self._nesting.depth > 0:
            # A fragment's steps are in the journal before its step ends; the plan's last
            # ones go with its end (``ended``, ``parked``), one write for both.
            await self._takeover.flush()
        if self.state is RunState.PARKED:
            raise PlanParked(self.parked)
        if self.state is RunState.RUNNING:
            self.state = RunState.FINISHED
        return tally(
            self.plan,
            self._records,
            started_at=started_at,
            wall_time=time.monotonic() - started,
            error=self.stop_reason,
        )

    async def _cancelled(self, cause: CancelCause | None) -> None:
        # The leader is stopping, and a durable plan outlives it: its request goes back to
        # the queue and another leader goes on from the journal, so the work in flight runs
        # on. A fragment's run goes on under another leader only with its plan's.
        takeover = self._takeover
        nested = self._nesting.depth > 0
        handing = takeover is not None and (
            takeover.is_handed_over if nested else cause is not CancelCause.REQUEST
        )
        if handing and takeover is not None:
            self.cancellation = Cancellation.HANDED_OVER
            self.state = RunState.STOPPED
            self.stop_reason = self.cancellation.value
            await takeover.hand_over(list(self._tasks.values()))
            return
        self.cancellation = (
            Cancellation.REQUESTED  # a cancel request for the plan
            if cause is CancelCause.REQUEST
            else Cancellation.LEADER_STOPPING
        )
        reason = self.cancellation.value
        # Everything launched, whether the graph still counts it or not.
        self._graph.stop(reason)
        await self._stop(Stop(reason, tuple(self._tasks)))

    async def _schedule(self) -> None:
        graph = self._graph
        while True:
            for subtask_id in graph.start():
                self._launch(self._by_id[subtask_id])
            if graph.is_finished:
                break
            ended = await self._next_ended()
            if ended is None:  # the plan's deadline passed with work still running
                await self._stop(graph.stop("the plan's deadline passed"))
                break
            if ended == [_PARK] and await self._park():
                return
            for effect in graph.settle((i, self._records[i].status) for i in ended):
                await self._carry_out(effect)
        reason = self.stop_reason or "a dependency did not succeed"
        for subtask_id in graph.unstarted():
            self._finish(self._records[subtask_id], SubtaskError.skipped(reason))

    def _launch(self, subtask: Subtask) -> None:
        task = asyncio.create_task(self._execute(subtask), name=subtask.id)
        # Finished tasks arrive on a queue: no scan over everything running at each end.
        task.add_done_callback(self._ended.put_nowait)
        self._tasks[subtask.id] = task

    async def _next_ended(self) -> list[str] | None:
        # The subtasks that ended since the last call (at least one); None at the deadline;
        # [_PARK] when every step left has waited for people long enough to park.
        try:
            async with asyncio.timeout(self._limits.seconds_left()):
                done = [await self._ended.get()]
        except TimeoutError:
            return None
        while not self._ended.empty():
            done.append(self._ended.get_nowait())
        tasks = [task for task in done if not isinstance(task, str)]
        if not tasks:
            return [_PARK]
        # A task a stop cancelled ends later: it is no longer the graph's business.
        return [t.get_name() for t in tasks if self._tasks.pop(t.get_name(), None) is t]

    async def _park(self) -> bool:
        questions = self._conversing.park()
        if questions is None or self._takeover is None:  # a step runs again, or an answer
            return False  # came just now: go on
        self.state = RunState.PARKED
        self.parked = questions
        await self._takeover.hand_over(list(self._tasks.values()))
        self._tasks.clear()
        return True

    async def _carry_out(self, effect: Skip | Stop) -> None:
        if isinstance(effect, Stop):
            await self._stop(effect)
            return
        reason = f"dependency {effect.cause!r} did not succeed"
        self._finish(self._records[effect.subtask_id], SubtaskError.skipped(reason))

    async def _stop(self, stop: Stop) -> None:
        self.state = RunState.STOPPED
        self.stop_reason = stop.reason
        tasks = [self._tasks[subtask_id] for subtask_id in stop.cancel]
        for task in tasks:
            task.cancel()
        # Each cancelled attempt sends its own cancel request before it ends.
        await asyncio.gather(*tasks, return_exceptions=True)
        for subtask_id in stop.cancel:
            self._tasks.pop(subtask_id, None)
            record = self._records[subtask_id]
            if not record.is_settled:
                self._finish(record, SubtaskError.cancelled(stop.reason))

    async def _execute(self, subtask: Subtask) -> None:
        record = self._records[subtask.id]
        if self._takeover is not None and self._takeover.settled_before(record):
            self._settled_before(record)  # another leader saw it end: not run again
            return
        if subtask.when is not None and not self._holds(subtask.when):
            self._results[subtask.id] = None  # its dependents run, and read null
            self._finish(record, SubtaskError.not_met())
            return
        parameters = self._parameters(subtask, record)
        if parameters is None:
            return
        record.status = SubtaskStatus.RUNNING
        record.started = time.time()
        self._emit(record, "started")
        if subtask.skill == APPROVAL and subtask.service is None:
            self._end_step(record, await self._conversing.approve(subtask, record, parameters))
        elif subtask.map is not None:
            self._end_step(record, await self._mapper.run(subtask, record, parameters))
        elif subtask.fragment:
            self._end_step(record, await self._expander.run(subtask, record, parameters))
        else:
            self._end_step(record, await self._steps.attempts(subtask, record, parameters))

    def _holds(self, when: dict[str, Any]) -> bool:  # a step's condition, on the results
        return truthy(evaluate(when, lambda name: resolve_input(name, self._results)))

    def _end_step(self, record: SubtaskRecord, result: AttemptResult) -> None:
        if isinstance(result, Answered):
            self._succeed(record, result)
        elif isinstance(result, Failed):
            self._finish(record, result.error)
        else:  # Asked: answered in attempts() before it returns
            raise AssertionError(f"{record.id} ended on a question")

    def _parameters(self, subtask: Subtask, record: SubtaskRecord) -> dict[str, Any] | None:
        # Its own and its inputs, from the results of its dependencies; None when one of
        # them lacks an input, which fails the subtask.
        try:
            return {
                **subtask.parameters,
                **{name: resolve_input(ref, self._results) for name, ref in subtask.inputs.items()},
            }
        except KeyError as exc:
            self._finish(record, SubtaskError.missing_input(exc.args[0]))
            return None

    def _finish(
        self,
        record: SubtaskRecord,
        error: SubtaskError | None = None,
        *,
        agent_id: str | None = None,
    ) -> None:
        record.status = SubtaskStatus.SUCCEEDED if error is None else error.status
        record.error = error
        record.ended = time.time()
        self._done += 1
        if self._takeover is not None:
            last = self._done == len(self._by_id) and self._nesting.depth == 0
            self._takeover.settled(record, last=last)
        self._emit(record, record.status.value, agent_id=agent_id, error=error)

    def _fragment(self, plan: Plan, prefix: str) -> Awaitable[Aggregate]:
        # A fragment's run: under this one's journal, limits, questions and progress.
        asking = PlanAsking(self._asking.questions, self._asking.request_id)
        nesting = Nesting(prefix, self._limits, self._nesting.depth + 1)
        child = PlanRunner(
            self._bus,
            plan,
            directory=self._directory,
            progress=self._sink,
            takeover=self._takeover,
            asking=asking,
            nesting=nesting,
        )
        return child.run()

    def _succeed(self, record: SubtaskRecord, answer: Answered) -> None:
        self._results[self._plain(record)] = record.result = answer.result
        if answer.usage:
            record.usage = answer.usage
            self._limits.spend(answer.usage)
        if answer.agent_id:  # none for a map of no items
            record.add_agent(answer.agent_id)
        self._finish(record, agent_id=answer.agent_id or None)

    def _settled_before(self, record: SubtaskRecord) -> None:
        # The record as the journal has it: its result, its usage and its end count here.
        if record.status is SubtaskStatus.SUCCEEDED or (
            record.error is not None and record.error.is_not_met
        ):
            self._results[self._plain(record)] = record.result
        self._limits.spend(record.usage or {})
        self._done += 1
        self._emit(record, record.status.value, error=record.error)

    def _plain(self, record: SubtaskRecord) -> str:  # its id in the plan, as inputs name it
        return record.id.removeprefix(self._nesting.prefix)

    def _emit(
        self,
        record: SubtaskRecord,
        transition: str,
        *,
        agent_id: str | None = None,
        error: SubtaskError | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self._progress.emit(
            record, transition, done=self._done, agent_id=agent_id, error=error, detail=detail
        )
